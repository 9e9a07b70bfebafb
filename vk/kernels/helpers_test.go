package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/vkinfer/vkinfer/internal/vktest"
	"github.com/vkinfer/vkinfer/quant"
	"github.com/vkinfer/vkinfer/vk"
)

// One device for the whole package: pipelines compile once (lavapipe's LLVM
// is the slow part), and each test checks the validation messages raised
// while it ran.
var (
	kernOnce sync.Once
	kern     *Kernels
)

func TestMain(m *testing.M) {
	code := m.Run()
	if kern != nil {
		kern.Close()
	}
	os.Exit(vktest.Close(code))
}

// setup returns the shared Kernels on the shared validated device.
func setup(t testing.TB) *Kernels {
	t.Helper()
	d := vktest.Shared(t)
	kernOnce.Do(func() { kern = New(d) })
	return kern
}

// buffer makes a device-local buffer of n bytes (rounded up to whole words),
// freed when t ends, holding data at its start.
func buffer(t testing.TB, n int64, data []byte) *vk.Buffer {
	t.Helper()
	b, err := kern.dev.NewBuffer(round4(max(n, int64(len(data)), 4)), false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Free)
	if len(data) > 0 {
		if err := b.Write(0, pad4(data)); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

func pad4(b []byte) []byte {
	if len(b)%4 == 0 {
		return b
	}
	return append(b[:len(b):len(b)], make([]byte, 4-len(b)%4)...)
}

// floatBuffer holds v.
func floatBuffer(t testing.TB, v []float32) *vk.Buffer {
	t.Helper()
	return buffer(t, f32(len(v)), f32Bytes(v))
}

func f32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func u32Bytes(v ...uint32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], x)
	}
	return b
}

// weightsAt binds raw (weights, padded to whole words) off bytes into a
// buffer of their own, so the kernels' binding offsets are exercised.
func weightsAt(t testing.TB, raw []byte, off int64) vk.Binding {
	t.Helper()
	b := buffer(t, off+int64(len(raw)), nil)
	if err := b.Write(off, pad4(raw)); err != nil {
		t.Fatal(err)
	}
	return vk.Binding{Buf: b, Off: off}
}

// whole binds all of b.
func whole(b *vk.Buffer) vk.Binding { return vk.Binding{Buf: b} }

// run records with rec into a fresh sequence and runs it to completion.
func run(t testing.TB, rec func(s *vk.Sequence) error) {
	t.Helper()
	s := kern.dev.NewSequence()
	defer s.Free()
	if err := rec(s); err != nil {
		t.Fatal(err)
	}
	if err := s.End(); err != nil {
		t.Fatal(err)
	}
	if err := s.Run(); err != nil {
		t.Fatal(err)
	}
}

// read returns n floats of b starting at byte off.
func read(t testing.TB, b *vk.Buffer, off int64, n int) []float32 {
	t.Helper()
	v := make([]float32, n)
	if err := b.ReadF32(off, v); err != nil {
		t.Fatal(err)
	}
	return v
}

// normals returns n values ~ N(0, 1) * sigma.
func normals(r *rand.Rand, n int, sigma float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64() * sigma)
	}
	return v
}

// weights returns rows*K random values shaped like trained weights are for
// the quantizers: every 16-value run has its own spread (from 1/64 to 4)
// and offset, so block scales, sub-block scales and mins all vary.
func weights(r *rand.Rand, rows, K int) []float32 {
	v := make([]float32, rows*K)
	for i := 0; i < len(v); i += 16 {
		sigma := math.Exp2(float64(r.IntN(9) - 6))
		mu := (r.Float64() - 0.5) * sigma
		for j := i; j < min(i+16, len(v)); j++ {
			v[j] = float32(mu + r.NormFloat64()*sigma)
		}
	}
	return v
}

// quantized quantizes rows x K random weights to t and returns the bytes and
// their exact dequantized values (what the GPU must compute with).
func quantized(t testing.TB, r *rand.Rand, qt quant.Type, rows, K int) ([]byte, []float32) {
	t.Helper()
	raw, err := quant.Quantize(qt, weights(r, rows, K))
	if err != nil {
		t.Fatal(err)
	}
	deq := make([]float32, rows*K)
	if err := quant.Dequantize(qt, raw, deq); err != nil {
		t.Fatal(err)
	}
	return raw, deq
}

// compare fails t when |got[i] - want[i]| > tol * scale[i] for any i,
// reporting the worst few. scale is the magnitude the error is measured
// against (e.g. sum |w*x| of a dot product); it also reports the largest
// relative error seen, so tolerances can be judged from the log (-v).
func compare(t testing.TB, what string, got []float32, want, scale []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d results, want %d", what, len(got), len(want))
	}
	worst, bad := 0.0, 0
	var report []string
	for i := range got {
		e := math.Abs(float64(got[i]) - want[i])
		rel := e / scale[i]
		if scale[i] == 0 {
			rel = e / math.SmallestNonzeroFloat64
			if e == 0 {
				rel = 0
			}
		}
		if math.IsNaN(float64(got[i])) {
			rel = math.Inf(1)
		}
		worst = max(worst, rel)
		if !(rel <= tol) {
			bad++
			if len(report) < 5 {
				report = append(report, fmt.Sprintf("[%d] got %g want %g (scale %g, error %.3g x scale)", i, got[i], want[i], scale[i], rel))
			}
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d values off by more than %g x scale:\n  %s", what, bad, len(got), tol, strings.Join(report, "\n  "))
	} else {
		t.Logf("%s: worst error %.3g x scale (tolerance %g)", what, worst, tol)
	}
}

// eps32 is the float32 unit roundoff.
const eps32 = 1.0 / (1 << 24)

// rejected is a call whose argument checks must refuse it.
type rejected struct {
	name string
	err  error
}

// expectRejected fails t for each call that was accepted and logs why the
// others were refused.
func expectRejected(t *testing.T, calls []rejected) {
	t.Helper()
	for _, c := range calls {
		if c.err == nil {
			t.Errorf("%s: accepted", c.name)
		} else {
			t.Logf("%s: %v", c.name, c.err)
		}
	}
}
