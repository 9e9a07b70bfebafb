// Package radvnull lets tests run a process on one of RADV's null devices:
// Mesa's AMD Vulkan driver, given RADV_FORCE_FAMILY, creates a device for
// that chip family with no AMD hardware present ("Null hardware (RADV
// NAVI31)"). Pipelines are compiled on it by ACO, AMD's shader compiler in
// Mesa; nothing can be dispatched. The variables must be set before the
// Vulkan loader starts, so the device exists only in a child process started
// with Env.
package radvnull

import (
	"os"
	"testing"
)

// ICD is the RADV driver manifest that mesa-vulkan-drivers installs.
const ICD = "/usr/share/vulkan/icd.d/radeon_icd.json"

// Families are the chip families the suite checks, GCN to RDNA4: tahiti
// (GCN1), polaris10 (RX 580), vega10, navi10 and navi14 (RDNA1), navi21 and
// navi22 (RDNA2), navi31 and navi33 (RDNA3), gfx1151 (RDNA3.5, Strix Halo),
// gfx1200 and gfx1201 (RDNA4).
var Families = []string{"tahiti", "polaris10", "vega10", "navi10", "navi14", "navi21", "navi22",
	"navi31", "navi33", "gfx1151", "gfx1200", "gfx1201"}

// Env returns the environment of a child process whose only Vulkan device
// is the null device of family. Without the RADV driver the test fails, as
// CI installs it; VKINFER_NO_VULKAN=1 makes it skip instead.
func Env(t testing.TB, family string) []string {
	t.Helper()
	if _, err := os.Stat(ICD); err != nil {
		if os.Getenv("VKINFER_NO_VULKAN") == "1" {
			t.Skipf("no RADV driver (VKINFER_NO_VULKAN=1): %v", err)
		}
		t.Fatalf("RADV's null devices need Mesa's RADV driver (mesa-vulkan-drivers; set VKINFER_NO_VULKAN=1 to skip): %v", err)
	}
	// VK_DRIVER_FILES takes precedence over VK_ICD_FILENAMES in newer
	// loaders, and either may be set already (CI selects Mesa 22 with it):
	// set both. exec.Cmd keeps the last of duplicate variables.
	return append(os.Environ(), "VK_DRIVER_FILES="+ICD, "VK_ICD_FILENAMES="+ICD, "RADV_FORCE_FAMILY="+family)
}
