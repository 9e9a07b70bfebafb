package quant

import (
	"math"
	"math/rand/v2"
	"testing"
)

// roundTrip quantizes x as t and decodes it again.
func roundTrip(t *testing.T, typ Type, x []float32) []float32 {
	t.Helper()
	b, err := Quantize(typ, x)
	if err != nil {
		t.Fatalf("Quantize %v: %v", typ, err)
	}
	if n, _ := typ.RowBytes(len(x)); len(b) != n {
		t.Fatalf("Quantize %v of %d values gave %d bytes, want %d", typ, len(x), len(b), n)
	}
	return decode(t, typ, b, len(x))
}

// roundTripBound is the largest relative RMS error allowed per format on
// standard normal data. A uniform quantizer with step Δ has RMS error Δ/√12.
// For the block formats Δ is the block's range over its level count: with
// 32 normal values the largest |x| is about 2.1σ (range about 4.1σ), with 16
// values about 1.8σ, so
//
//	Q8_0: 2.1/127/√12 ≈ 0.0048   Q4_0: 2.1/7.5/√12 ≈ 0.081 (half-range 7.5 levels)
//	Q4_K: 4.1/15/√12 ≈ 0.079     Q5_K: 4.1/31/√12 ≈ 0.038
//	Q6_K: 1.8/31.5/√12 ≈ 0.017
//
// and F16 / BF16 round to 11 / 8 significant bits: relative error RMS
// 2^-11/√3 ≈ 2.8e-4 and 2^-8/√3 ≈ 2.3e-3 at most (less on average).
// The bounds add 15-20% headroom over those estimates; measured values (seeded
// data, logged by -v) are F16 2.1e-4, BF16 1.7e-3, Q8_0 0.0049, Q4_0 0.081,
// Q4_K 0.070, Q5_K 0.035, Q6_K 0.017. F32 must be exact.
var roundTripBound = map[Type]float64{
	F32: 0, F16: 3.5e-4, BF16: 2.8e-3,
	Q8_0: 0.0058, Q4_0: 0.095, Q4_K: 0.092, Q5_K: 0.045, Q6_K: 0.020,
}

func TestRoundTripError(t *testing.T) {
	x := gaussian(11, 64*256)
	for typ, bound := range roundTripBound {
		e := relRMS(x, roundTrip(t, typ, x))
		t.Logf("%v: relative RMS error %.3g (bound %.3g)", typ, e, bound)
		if e > bound {
			t.Errorf("%v round trip of normal data: relative RMS error %.5f > %.5f", typ, e, bound)
		}
	}
}

// TestRoundTripScaleInvariant checks the bounds hold far from unit scale,
// where the f16 scales are subnormal-adjacent or large, and with a mean
// offset (the K-quant mins).
func TestRoundTripScaleInvariant(t *testing.T) {
	base := gaussian(12, 16*256)
	for _, c := range []struct{ mul, add float32 }{{1e-4, 0}, {3e3, 0}, {0.02, 0.05}, {1, -3}} {
		x := make([]float32, len(base))
		for i, v := range base {
			x[i] = v*c.mul + c.add
		}
		for _, typ := range blockTypes {
			// The bound is relative to the spread, so measure the error
			// against the RMS of the centred data.
			y := roundTrip(t, typ, x)
			var e float64
			for i := range x {
				d := float64(x[i] - y[i])
				e += d * d
			}
			rel := math.Sqrt(e/float64(len(x))) / float64(c.mul)
			if c.add != 0 && (typ == Q8_0 || typ == Q4_0 || typ == Q6_K) {
				// Symmetric formats spend levels on the offset: allow the
				// error of a range of |add|+2.1σ instead of 2.1σ.
				rel *= 2.1 / (2.1 + float64(abs32(c.add/c.mul)))
			}
			if rel > roundTripBound[typ] {
				t.Errorf("%v at scale %g offset %g: relative RMS error %.5f > %.5f", typ, c.mul, c.add, rel, roundTripBound[typ])
			}
		}
	}
}

// Naive max-abs quantizers, written independently of the package: each
// block (or sub-block) scale is taken from its extreme values, and scales
// are then stored the same way as the real formats do (f16, and 6 / 8-bit
// sub-block scales), so the comparison isolates the scale search.
func naiveRound(v float64, lo, hi int) float64 {
	return math.Max(float64(lo), math.Min(float64(hi), math.Round(v)))
}

func toHalf(v float64) float64 { return float64(halfToFloat(halfBits(float32(v)))) }

func safeDiv(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// naiveSymmetric: blocks of n with d = f16(m/lo) where m is the value of
// largest magnitude (ggml's reference Q4_0 and Q8_0 rule).
func naiveSymmetric(x []float32, n, lo, hi int) []float32 {
	y := make([]float32, len(x))
	for b := 0; b < len(x); b += n {
		var m float64
		for _, v := range x[b : b+n] {
			if math.Abs(float64(v)) > math.Abs(m) {
				m = float64(v)
			}
		}
		d := toHalf(m / float64(lo))
		if lo == -hi {
			d = math.Abs(d)
		}
		for i := b; i < b+n; i++ {
			y[i] = float32(d * naiveRound(safeDiv(float64(x[i]), d), lo, hi))
		}
	}
	return y
}

// naiveK: Q4_K / Q5_K with each sub-block's scale (max-min)/nmax and min
// -min (min clamped to ≤ 0), then 6-bit scales against f16 d and dmin.
func naiveK(x []float32, nmax int) []float32 {
	y := make([]float32, len(x))
	for b := 0; b < len(x); b += 256 {
		var s, m [8]float64
		var maxS, maxM float64
		for j := range 8 {
			lo, hi := 0.0, math.Inf(-1)
			for _, v := range x[b+32*j : b+32*j+32] {
				lo, hi = math.Min(lo, float64(v)), math.Max(hi, float64(v))
			}
			s[j], m[j] = (hi-lo)/float64(nmax), -lo
			maxS, maxM = math.Max(maxS, s[j]), math.Max(maxM, m[j])
		}
		d, dmin := toHalf(maxS/63), toHalf(maxM/63)
		for j := range 8 {
			a := d * naiveRound(safeDiv(s[j], d), 0, 63)
			c := dmin * naiveRound(safeDiv(m[j], dmin), 0, 63)
			for i := b + 32*j; i < b+32*j+32; i++ {
				y[i] = float32(a*naiveRound(safeDiv(float64(x[i])+c, a), 0, nmax) - c)
			}
		}
	}
	return y
}

// naiveQ6K: each 16-value sub-block's scale is m/-32 (m the value of largest
// magnitude), then 8-bit scales against f16 d = -maxscale/128.
func naiveQ6K(x []float32) []float32 {
	y := make([]float32, len(x))
	for b := 0; b < len(x); b += 256 {
		var s [16]float64
		var maxS float64
		for j := range 16 {
			var m float64
			for _, v := range x[b+16*j : b+16*j+16] {
				if math.Abs(float64(v)) > math.Abs(m) {
					m = float64(v)
				}
			}
			s[j] = m / -32
			if math.Abs(s[j]) > math.Abs(maxS) {
				maxS = s[j]
			}
		}
		d := toHalf(-maxS / 128)
		for j := range 16 {
			a := d * naiveRound(safeDiv(s[j], d), -128, 127)
			for i := b + 16*j; i < b+16*j+16; i++ {
				y[i] = float32(a * naiveRound(safeDiv(float64(x[i]), a), -32, 31))
			}
		}
	}
	return y
}

// TestSearchBeatsMaxAbs requires the scale search to beat the naive max-abs
// quantizer on RMS error by at least 3% on every distribution tried (normal,
// uniform, Laplace; measured gains 4-13%, logged by -v): a quantizer that
// silently fell back to max-abs, or dropped the least-squares refit, fails.
func TestSearchBeatsMaxAbs(t *testing.T) {
	naive := map[Type]func([]float32) []float32{
		Q8_0: func(x []float32) []float32 { return naiveSymmetric(x, 32, -127, 127) },
		Q4_0: func(x []float32) []float32 { return naiveSymmetric(x, 32, -8, 7) },
		Q4_K: func(x []float32) []float32 { return naiveK(x, 15) },
		Q5_K: func(x []float32) []float32 { return naiveK(x, 31) },
		Q6_K: naiveQ6K,
	}
	const minGain = 0.03
	dists := []struct {
		name string
		draw func(r *rand.Rand) float64
	}{
		{"normal", (*rand.Rand).NormFloat64},
		{"uniform", func(r *rand.Rand) float64 { return 2*r.Float64() - 1 }},
		{"laplace", func(r *rand.Rand) float64 { return r.ExpFloat64() * float64(1-2*r.IntN(2)) }},
	}
	for i, d := range dists {
		r := rand.New(rand.NewPCG(5, uint64(i)))
		x := make([]float32, 64*256)
		for i := range x {
			x[i] = float32(d.draw(r))
		}
		for typ, f := range naive {
			ours, theirs := relRMS(x, roundTrip(t, typ, x)), relRMS(x, f(x))
			gain := 1 - ours/theirs
			t.Logf("%-7s %v: search %.5f, max-abs %.5f, gain %.1f%%", d.name, typ, ours, theirs, 100*gain)
			if gain < minGain {
				t.Errorf("%s data, %v: search error %.5f vs max-abs %.5f: gain %.1f%% < %.0f%%", d.name, typ, ours, theirs, 100*gain, 100*minGain)
			}
		}
	}
}

// TestQuantizeExactGrid feeds each format values it can represent exactly,
// with scales that are exact in binary16 and levels that cover the full
// range; the search must then find the exact representation (zero error).
func TestQuantizeExactGrid(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 1))
	// grid returns blocks of n values s·q + off with random integer levels q
	// in [lo, hi], each block containing both lo and hi.
	grid := func(nb, n, lo, hi int, s, off float32) []float32 {
		x := make([]float32, nb*n)
		for b := range nb {
			for i := range n {
				q := lo + r.IntN(hi-lo+1)
				switch i {
				case 3:
					q = lo
				case n - 2:
					q = hi
				}
				x[b*n+i] = s*float32(q) + off
			}
		}
		return x
	}
	cases := []struct {
		typ Type
		x   []float32
	}{
		{Q8_0, grid(16, 32, -127, 127, 0.25, 0)},
		{Q4_0, grid(16, 32, -8, 7, 1.5, 0)},
		{Q6_K, grid(8*16, 16, -32, 31, 0.25, 0)},         // d = -2^-9, scales all -128
		{Q4_K, grid(8*8, 32, 0, 15, 63.0/64, -63.0/128)}, // d = 1/64, dmin = 1/128, scales and mins 63
		{Q5_K, grid(8*8, 32, 0, 31, 63.0/64, -63.0/256)}, // d = 1/64, dmin = 1/256
		{F16, grid(4, 64, -2048, 2047, 1.0/1024, 0)},
		{BF16, grid(4, 64, -128, 127, 0.5, 0)},
		{F32, gaussian(3, 100)},
	}
	for _, c := range cases {
		y := roundTrip(t, c.typ, c.x)
		for i := range c.x {
			if y[i] != c.x[i] {
				t.Fatalf("%v: value %d = %g round-trips to %g", c.typ, i, c.x[i], y[i])
			}
		}
	}
}

// TestQuantizeSpecialBlocks covers blocks a scale search can trip on:
// all zero, constant, a single non-zero value, all positive, all negative.
func TestQuantizeSpecialBlocks(t *testing.T) {
	blocks := map[string]func(i int) float32{
		"zero":      func(int) float32 { return 0 },
		"constant":  func(int) float32 { return 0.75 },
		"negative":  func(int) float32 { return -0.75 },
		"one spike": func(i int) float32 { return float32(map[bool]int{true: 5}[i == 77]) },
		"positive":  func(i int) float32 { return 1 + float32(i%13)/13 },
		"negatives": func(i int) float32 { return -1 - float32(i%11)/11 },
	}
	for name, f := range blocks {
		x := make([]float32, 512)
		for i := range x {
			x[i] = f(i)
		}
		for _, typ := range blockTypes {
			y := roundTrip(t, typ, x)
			var e float64
			for i := range x {
				e = math.Max(e, math.Abs(float64(x[i]-y[i])))
			}
			// Max error: under half a level step of the block's range.
			rangeMax := 0.0
			for _, v := range x {
				rangeMax = math.Max(rangeMax, math.Abs(float64(v)))
			}
			if e > rangeMax/7 {
				t.Errorf("%s block as %v: max error %g (block max %g)", name, typ, e, rangeMax)
			}
			if name == "zero" || name == "one spike" {
				for i := range x {
					if x[i] == 0 && y[i] != 0 {
						t.Errorf("%s block as %v: zero at %d decodes to %g", name, typ, i, y[i])
						break
					}
				}
			}
		}
	}
}
