package vk

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/vkinfer/vkinfer/shaders"
)

func saxpy(t testing.TB, d *Device, wg uint32) *Pipeline {
	t.Helper()
	p, err := d.Pipeline(PipelineSpec{
		Name:     "test_saxpy",
		SPIRV:    shaders.SPIRV("test_saxpy"),
		Bindings: 2,
		PushSize: 8,
		Spec:     []uint32{wg},
	})
	must(t, err)
	return p
}

func randF32(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = r.Float32()*2 - 1
	}
	return v
}

// checkSaxpy compares the GPU result with a CPU reference; a*x+y in float32
// may be fused on the GPU, so allow one rounding.
func checkSaxpy(t *testing.T, got, x, y []float32, a float32) {
	t.Helper()
	for i := range got {
		want := a*x[i] + y[i]
		if diff := got[i] - want; diff > 1e-6 || diff < -1e-6 {
			t.Fatalf("y[%d] = %v, want %v", i, got[i], want)
		}
	}
}

func TestSaxpyAwkwardSizes(t *testing.T) {
	d := openTest(t)
	r := rand.New(rand.NewPCG(1, 2))
	for _, wg := range []uint32{64, 7} {
		p := saxpy(t, d, wg)
		if p.LocalSize() != [3]uint32{wg, 1, 1} {
			t.Fatalf("LocalSize = %v, want [%d 1 1]", p.LocalSize(), wg)
		}
		for _, n := range []int{1, 7, 255, 257, 1025, 4099} {
			t.Run(fmt.Sprintf("wg%d/n%d", wg, n), func(t *testing.T) {
				x, y := randF32(r, n), randF32(r, n)
				a := float32(1.5)
				// Device-local y with a guard word after it that must survive.
				xb, err := d.NewBuffer(int64(4*n), true)
				must(t, err)
				defer xb.Free()
				yb, err := d.NewBuffer(int64(4*n+4), false)
				must(t, err)
				defer yb.Free()
				must(t, xb.WriteF32(0, x))
				must(t, yb.WriteF32(0, append(append([]float32(nil), y...), 42)))
				s := d.NewSequence()
				defer s.Free()
				groups := (uint32(n) + wg - 1) / wg
				s.Dispatch(p, []Binding{{Buf: xb}, {Buf: yb, Size: int64(4 * n)}}, Push(uint32(n), a), groups, 1, 1)
				must(t, s.End())
				must(t, s.Run())
				got := make([]float32, n+1)
				must(t, yb.ReadF32(0, got))
				checkSaxpy(t, got[:n], x, y, a)
				if got[n] != 42 {
					t.Fatalf("guard word after y = %v, want 42", got[n])
				}
			})
		}
	}
}

// TestSequenceReplay records once and runs many times with new contents,
// including a chain where each dispatch reads the previous one's output.
func TestSequenceReplay(t *testing.T) {
	d := openTest(t)
	const n = 1000
	p := saxpy(t, d, 64)
	xb, err := d.NewBuffer(4*n, true)
	must(t, err)
	yb, err := d.NewBuffer(4*n, false)
	must(t, err)
	s := d.NewSequence()
	defer s.Free()
	groups := uint32((n + 63) / 64)
	// y = 2x + y, then y = 3x + y: with the barrier, y ends as 5x + y.
	s.Dispatch(p, []Binding{{Buf: xb}, {Buf: yb}}, Push(uint32(n), float32(2)), groups, 1, 1)
	s.Barrier()
	s.Dispatch(p, []Binding{{Buf: xb}, {Buf: yb}}, Push(uint32(n), float32(3)), groups, 1, 1)
	must(t, s.End())
	r := rand.New(rand.NewPCG(3, 4))
	for run := 0; run < 4; run++ {
		x, y := randF32(r, n), randF32(r, n)
		must(t, xb.WriteF32(0, x))
		must(t, yb.WriteF32(0, y))
		must(t, s.Run())
		got := make([]float32, n)
		must(t, yb.ReadF32(0, got))
		for i := range got {
			want := 3*x[i] + (2*x[i] + y[i])
			if diff := got[i] - want; diff > 1e-5 || diff < -1e-5 {
				t.Fatalf("run %d: y[%d] = %v, want %v", run, i, got[i], want)
			}
		}
	}
}

// TestGPUAssistedValidation shows that GPU-assisted validation, which CI
// turns on for a pass of the whole suite (VKINFER_GPU_VALIDATION=1), sees
// what a shader does at run time: saxpy told n is larger than its buffers
// writes past their end, which no API-level check can know.
func TestGPUAssistedValidation(t *testing.T) {
	d, err := Open(Options{Device: -1, AllowCPU: true, Validation: true, GPUAssisted: true})
	needVulkan(t, err)
	defer d.Close()
	p := saxpy(t, d, 64)
	x, err := d.NewBuffer(4*64, false)
	must(t, err)
	defer x.Free()
	y, err := d.NewBuffer(4*64, false)
	must(t, err)
	defer y.Free()
	s := d.NewSequence()
	defer s.Free()
	s.Dispatch(p, []Binding{{Buf: x}, {Buf: y}}, Push(uint32(128), float32(2)), 2, 1, 1)
	must(t, s.End())
	must(t, s.Run())
	msgs := d.Messages()
	if len(msgs) == 0 || !strings.Contains(strings.Join(msgs, "\n"), "out of bounds") {
		t.Fatalf("writing 128 floats into 64: %d validation messages %q, want an out-of-bounds report", len(msgs), msgs)
	}
}
