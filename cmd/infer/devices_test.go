package main

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/vkinfer/vkinfer/internal/fixtures"
	"github.com/vkinfer/vkinfer/internal/radvnull"
)

// inferEnv runs the binary in the environment env (nil: this process's).
func inferEnv(t *testing.T, env []string, args ...string) result {
	t.Helper()
	cmd := command(t, args...)
	cmd.Env = env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	t0 := time.Now()
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String(), took: time.Since(t0)}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return r
}

// lastLine is the last line of stderr, where a failing command says why.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// TestDevicesNullHardware lists each of RADV's null devices, which Mesa
// 25.0 once made crash (the memory budget of navi33, gfx1151 and gfx1201):
// each must be listed with why it cannot run work and the queue family
// chosen for it.
func TestDevicesNullHardware(t *testing.T) {
	for _, family := range radvnull.Families {
		t.Run(family, func(t *testing.T) {
			r := inferEnv(t, radvnull.Env(t, family), "devices", "--verbose")
			name := "Null hardware (RADV " + strings.ToUpper(family) + ")"
			if r.code != 0 || !strings.Contains(r.stdout, "Device 0: "+name) {
				t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			for _, want := range []string{"cannot run work  reports no memory heaps",
				"queue            family 0 of 1 (graphics compute transfer sparse): AMD: graphics+compute"} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("lacks %q:\n%s", want, r.stdout)
				}
			}
		})
	}
}

// TestRunOnNullHardware asks for a model on a null device, which once
// crashed in Device.Close (vkDeviceWaitIdle) after engine creation failed:
// it must end with one clear error, and --backend auto must fall back to
// the CPU saying why.
func TestRunOnNullHardware(t *testing.T) {
	env := radvnull.Env(t, "navi31")
	args := []string{"-m", fixtures.Path(t, "stories260K.gguf"), "-p", "hi", "-n", "4", "--temp", "0"}
	r := inferEnv(t, env, append(args, "--backend", "vulkan")...)
	last := lastLine(r.stderr)
	if r.code != 1 || !strings.HasPrefix(last, "error: ") ||
		!strings.Contains(last, "Null hardware (RADV NAVI31), cannot run work: it reports no memory heaps") {
		t.Fatalf("--backend vulkan: exit %d, last line %q; want exit 1 and a 'cannot run work' error\n%s", r.code, last, r.stderr)
	}
	r = inferEnv(t, env, append(args, "--backend", "auto")...)
	if r.code != 0 || !strings.Contains(r.stderr, "cannot run work") || !strings.Contains(r.stderr, "using the CPU") {
		t.Fatalf("--backend auto: exit %d\n%s", r.code, r.stderr)
	}
}

// TestDevicesVerbose: on the machine's own devices (lavapipe in CI),
// --verbose names each device's queue family, and devices takes no
// arguments.
func TestDevicesVerbose(t *testing.T) {
	r := infer(t, "devices", "--verbose")
	if r.code != 0 || !strings.Contains(r.stdout, "  queue            family ") {
		t.Fatalf("devices --verbose: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if plain := infer(t, "devices"); strings.Contains(plain.stdout, "  queue  ") {
		t.Errorf("devices without --verbose names the queue:\n%s", plain.stdout)
	}
	r = infer(t, "devices", "extra")
	if r.code != 1 || !strings.Contains(lastLine(r.stderr), "unexpected argument") {
		t.Fatalf("devices extra: exit %d, %q", r.code, r.stderr)
	}
}
