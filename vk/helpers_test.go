package vk

import (
	"os"
	"testing"
)

// openTest opens the preferred device (lavapipe allowed) with validation on
// and fails the test on any validation message once the test ends. Without
// a usable device it fails, unless VKINFER_NO_VULKAN=1 says none exists.
func openTest(t testing.TB) *Device {
	t.Helper()
	// Keep the pipeline cache of tests out of the user's cache.
	if os.Getenv("XDG_CACHE_HOME") == "" {
		t.Setenv("XDG_CACHE_HOME", t.TempDir())
	}
	d, err := Open(Options{Device: -1, AllowCPU: true, Validation: true, GPUAssisted: os.Getenv("VKINFER_GPU_VALIDATION") == "1"})
	needVulkan(t, err)
	t.Cleanup(func() {
		d.Close()
		for _, m := range d.Messages() {
			t.Errorf("validation: %s", m)
		}
	})
	return d
}

// needVulkan fails on err, or skips when VKINFER_NO_VULKAN=1 says the
// machine has no Vulkan.
func needVulkan(t testing.TB, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if os.Getenv("VKINFER_NO_VULKAN") == "1" {
		t.Skipf("no Vulkan (VKINFER_NO_VULKAN=1): %v", err)
	}
	t.Fatalf("%v (set VKINFER_NO_VULKAN=1 to skip on machines without Vulkan)", err)
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
