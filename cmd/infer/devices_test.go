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

// TestCoopMatNullHardware: RADV's navi31 null device (RDNA3) lists its
// cooperative-matrix shapes and the policy's choice under --verbose, and
// --coopmat on builds its kernels; navi21 (RDNA2, no WMMA) has none, so
// --coopmat on is an error naming the device and why, and check, run and
// bench take the flag too (lavapipe has no cooperative matrices).
func TestCoopMatNullHardware(t *testing.T) {
	r := inferEnv(t, radvnull.Env(t, "navi31"), "devices", "--verbose")
	for _, want := range []string{"  coop matrix      16x16x16 f16*f16+f16->f16, 16x16x16 f16*f16+f32->f32, ",
		"  coopmat policy   16x16x16 f16, s8 16x16x16, subgroup 64: offers 16x16x16 f16*f16+f32 subgroup fragments"} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Errorf("navi31 devices --verbose: exit %d, lacks %q:\n%s%s", r.code, want, r.stdout, r.stderr)
		}
	}
	env := append(radvnull.Env(t, "navi31"), "XDG_CACHE_HOME="+t.TempDir())
	r = inferEnv(t, env, "kernels", "-m", "synth:tiny", "--coopmat", "on", "-o", "json")
	if r.code != 0 {
		t.Errorf("navi31 kernels --coopmat on: exit %d: %s", r.code, lastLine(r.stderr))
	}
	r = inferEnv(t, radvnull.Env(t, "navi21"), "devices", "--verbose")
	if !strings.Contains(r.stdout, "  coopmat policy   off: lacks VK_KHR_cooperative_matrix") {
		t.Errorf("navi21 devices --verbose:\n%s", r.stdout)
	}
	env = append(radvnull.Env(t, "navi21"), "XDG_CACHE_HOME="+t.TempDir())
	r = inferEnv(t, env, "kernels", "-m", "synth:tiny", "--coopmat", "on")
	if want := "error: vulkan: cooperative matrices asked for, but Null hardware (RADV NAVI21) lacks VK_KHR_cooperative_matrix"; r.code != 1 ||
		!strings.HasPrefix(lastLine(r.stderr), want) {
		t.Errorf("navi21 kernels --coopmat on: exit %d, %q; want %q", r.code, lastLine(r.stderr), want)
	}
	story := fixtures.Path(t, "stories260K.gguf")
	for _, args := range [][]string{
		{"check", "-m", story, "-n", "2", "--coopmat", "on"},
		{"-m", story, "-p", "hi", "-n", "2", "--backend", "vulkan", "--coopmat", "on"},
		{"bench", "-m", story, "-p", "8", "-n", "0", "-r", "1", "--backend", "vulkan", "--coopmat", "on"},
	} {
		r := infer(t, args...)
		if r.code != 1 || !strings.Contains(lastLine(r.stderr), "cooperative matrices asked for, but ") {
			t.Errorf("%v on the test device: exit %d, %q; want the cooperative-matrix error", args, r.code, lastLine(r.stderr))
		}
	}
	r = infer(t, "check", "-m", story, "-n", "2", "--coopmat", "off")
	if r.code != 0 || !strings.Contains(r.stderr, "no cooperative matrices: ") {
		t.Errorf("check --coopmat off: exit %d\n%s", r.code, r.stderr)
	}
}
