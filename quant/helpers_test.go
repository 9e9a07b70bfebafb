package quant

import (
	"math"
	"math/rand/v2"
	"testing"
)

// gaussian returns n standard normal values from a seeded generator.
func gaussian(seed uint64, n int) []float32 {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

func sumSq(x []float32) float64 {
	var s float64
	for _, v := range x {
		s += float64(v) * float64(v)
	}
	return s
}

// relRMS is the RMS of want−got relative to the RMS of want.
func relRMS(want, got []float32) float64 {
	var e float64
	for i := range want {
		d := float64(want[i]) - float64(got[i])
		e += d * d
	}
	return math.Sqrt(e / sumSq(want))
}

// checkDot requires Dot(t, row, x) to match Σ w[i]·x[i] in float64, where w
// is the dequantized row, within float32 rounding of the products summed:
// 1e-5 of Σ|w·x| (the kernels sum up to 256 products in float32 before
// widening; rounding grows like √n·2^-24 ≈ 1e-6 of that sum).
func checkDot(t *testing.T, typ Type, row []byte, w, x []float32) {
	t.Helper()
	var want, mag float64
	for i := range w {
		want += float64(w[i]) * float64(x[i])
		mag += math.Abs(float64(w[i]) * float64(x[i]))
	}
	got := Dot(typ, row, x)
	if math.Abs(float64(got)-want) > 1e-5*mag+1e-30 {
		t.Fatalf("%v Dot over %d values = %g, Σ dequant·x = %g (Σ|w·x| = %g)", typ, len(x), got, want, mag)
	}
}
