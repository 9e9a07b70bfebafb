// Package vktest gives tests a Vulkan device (lavapipe in CI) with the
// Khronos validation layer on (and its GPU-assisted validation, which
// instruments shaders, when VKINFER_GPU_VALIDATION=1), and fails a test on
// any validation message raised while it runs. A missing device fails the
// test too, unless VKINFER_NO_VULKAN=1 says that is expected (then it
// skips; CI never sets it).
//
// VKINFER_VALIDATION=off opens the device without the layer, so that the
// tests check results only. It is for a GPU whose extensions the installed
// layer predates: Debian bookworm's 1.3.239 does not know
// VK_KHR_cooperative_matrix, and under it the device reports its matrix
// units unusable, so the kernels' device cases would not run at all. CI
// never sets it.
package vktest

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/vkinfer/vkinfer/vk"
)

var shared struct {
	once sync.Once
	dev  *vk.Device
	err  error
}

// open opens the preferred device with validation (unless
// VKINFER_VALIDATION=off), and with GPU-assisted validation too when
// VKINFER_GPU_VALIDATION=1 (a pass of CI).
func open() (*vk.Device, error) {
	validate := os.Getenv("VKINFER_VALIDATION") != "off"
	return vk.Open(vk.Options{Device: -1, AllowCPU: true, Validation: validate, GPUAssisted: validate && os.Getenv("VKINFER_GPU_VALIDATION") == "1"})
}

// Shared returns the process's one validated device, opening it on first use.
// Call Close from TestMain after m.Run.
func Shared(t testing.TB) *vk.Device {
	t.Helper()
	shared.once.Do(func() { shared.dev, shared.err = open() })
	need(t, shared.err)
	watch(t, shared.dev)
	return shared.dev
}

// Open returns a new validated device, closed when t ends.
func Open(t testing.TB) *vk.Device {
	t.Helper()
	d, err := open()
	need(t, err)
	watch(t, d)
	t.Cleanup(d.Close)
	return d
}

// Close closes the shared device, if it was opened, and returns 1 when
// closing raised validation messages (printed on stderr), else code.
func Close(code int) int {
	if shared.dev == nil {
		return code
	}
	before := len(shared.dev.Messages())
	shared.dev.Close()
	if msgs := shared.dev.Messages(); len(msgs) > before {
		fmt.Fprintf(os.Stderr, "validation messages at close:\n%s\n", strings.Join(msgs[before:], "\n"))
		return 1
	}
	return code
}

func need(t testing.TB, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if os.Getenv("VKINFER_NO_VULKAN") == "1" {
		t.Skipf("no Vulkan device (VKINFER_NO_VULKAN=1): %v", err)
	}
	t.Fatalf("a Vulkan device is needed for this test (set VKINFER_NO_VULKAN=1 to skip): %v", err)
}

// watch fails t on validation messages raised from now until t ends.
func watch(t testing.TB, d *vk.Device) {
	before := len(d.Messages())
	t.Cleanup(func() {
		if msgs := d.Messages(); len(msgs) > before {
			t.Errorf("%d validation messages:\n%s", len(msgs)-before, strings.Join(msgs[before:], "\n"))
		}
	})
}

// CoopEmulationBroken says why the software emulation of cooperative
// matrices (coopmat.glsl's COOPMAT_EMULATE builds) cannot be checked on
// device d, "" where it can. Mesa 22.3's lavapipe computes wrong results
// for emulated tiles of more than one fragment per subgroup, and for some
// emulated attention tiles, which Mesa 25's lavapipe and NVIDIA's driver
// compute correctly (docs/VULKAN.md); the emulation runs only in tests, so
// its tests log this and check nothing there.
func CoopEmulationBroken(d *vk.Device) string {
	if i := d.Info(); i.Type == "cpu" && strings.HasPrefix(i.DriverInfo, "Mesa 22.") {
		return fmt.Sprintf("%s (%s) miscomputes the emulated cooperative-matrix kernels", i.Name, i.DriverInfo)
	}
	return ""
}
