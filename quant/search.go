package quant

import (
	"fmt"
	"math"
)

// Scale search shared by the quantizers. A quantizer stores x ≈ s·q with an
// integer level q in a small range; taking s from the largest |x| alone (the
// naive max-abs scale) wastes levels whenever the other values fall between
// them badly. Like ggml's make_qx_quants / make_qkx2_quants, these try a
// fan of candidate scales around the max-abs one, round every value to its
// level under each, refit the scale (and offset) to those levels by least
// squares, and keep the candidate with the least squared error. The max-abs
// scale is one of the candidates and the refit never increases its error, so
// the search is never worse than max-abs before the scale itself is rounded
// to f16 or to 6/8 bits.

// searchSteps is the number of candidates on each side of the max-abs one;
// candidate k moves the level the extreme value lands on by k·searchStep,
// so the fan spans ±1 level. Eleven candidates measured as good as 21 (steps
// of 0.1) to three significant digits of the RMS error at half the time;
// five lose 0.3-1%.
const (
	searchSteps = 5
	searchStep  = 0.2
)

// roundMagic is 1.5·2^52: adding and subtracting it rounds a float64 of
// magnitude below 2^51 to the nearest integer (ties to even) within the float
// unit, with no conversion to int and back.
const roundMagic = 0x1.8p52

// nearestLevel rounds v to the nearest integer and clamps it to [lo, hi]
// (integers). It runs for every value under every candidate scale, so it
// stays in float64; replacing math.Floor and a clamp through int with it
// halved the quantizers' time. A v too large for the trick is clamped all
// the same.
func nearestLevel(v, lo, hi float64) float64 {
	q := (v + roundMagic) - roundMagic
	if q < lo {
		q = lo
	}
	if q > hi {
		q = hi
	}
	return q
}

// roundLevel is nearestLevel for integer levels.
func roundLevel(v float64, lo, hi int) int {
	return int(nearestLevel(v, float64(lo), float64(hi)))
}

// fitSymmetric returns the scale s minimising Σ(x - s·q)² over integer levels
// q in [lo, hi] (lo = -hi for Q8_0, -hi-1 for Q4_0 and Q6_K). The value of
// largest magnitude is mapped towards lo, so s takes the sign that gives it
// the longer half of an asymmetric range. It returns 0 for an all-zero x.
func fitSymmetric(x []float32, lo, hi int) float32 {
	var m float64 // the value of largest magnitude, with its sign
	for _, v := range x {
		if math.Abs(float64(v)) > math.Abs(m) {
			m = float64(v)
		}
	}
	if m == 0 {
		return 0
	}
	flo, fhi := float64(lo), float64(hi)
	var best, bestScore float64
	for k := -searchSteps; k <= searchSteps; k++ {
		iscale := (flo - searchStep*float64(k)) / m
		var sxq, sqq float64
		for _, v := range x {
			q := nearestLevel(iscale*float64(v), flo, fhi)
			sxq += float64(v) * q
			sqq += q * q
		}
		// With s = Σxq/Σq² the error is Σx² − (Σxq)²/Σq²: maximise the
		// second term.
		if sqq > 0 && sxq*sxq/sqq > bestScore {
			best, bestScore = sxq/sqq, sxq*sxq/sqq
		}
	}
	return float32(best)
}

// fitAffine returns s ≥ 0 and m ≥ 0 minimising Σ(x - (s·q - m))² over integer
// levels q in [0, nmax] (the K-quant sub-block form). m is kept ≥ 0 (the
// offset -m never above zero) because the formats store it unsigned; a block
// of positive values then has m = 0.
func fitAffine(x []float32, nmax int) (s, m float32) {
	lo, hi := float64(0), math.Inf(-1)
	var sx float64
	for _, v := range x {
		lo = min(lo, float64(v))
		hi = max(hi, float64(v))
		sx += float64(v)
	}
	if hi <= lo { // every value equals lo ≤ 0: exact with q = 0
		return 0, float32(-lo)
	}
	n, fmax := float64(len(x)), float64(nmax)
	var bestS, bestC float64
	bestScore := math.Inf(-1)
	for k := -searchSteps; k <= searchSteps; k++ {
		iscale := (fmax + searchStep*float64(k)) / (hi - lo)
		var sq, sqq, sxq float64
		for _, v := range x {
			q := nearestLevel(iscale*(float64(v)-lo), 0, fmax)
			sq += q
			sqq += q * q
			sxq += float64(v) * q
		}
		// Least squares for x ≈ s·q + c. When c comes out above zero, or
		// all levels are equal (a block of equal positive values), fit
		// x ≈ s·q with c = 0 instead.
		s, c := 0.0, 1.0
		if det := n*sqq - sq*sq; det > 0 {
			s = (n*sxq - sx*sq) / det
			c = (sx - s*sq) / n
		}
		if c > 0 {
			if sqq == 0 {
				continue
			}
			s, c = sxq/sqq, 0
		}
		// At a least-squares optimum the error is Σx² − s·Σxq − c·Σx.
		if score := s*sxq + c*sx; score > bestScore {
			bestS, bestC, bestScore = s, c, score
		}
	}
	return float32(max(bestS, 0)), float32(-bestC)
}

// scaleHalf rounds a block scale to the binary16 the formats store and
// returns both. A scale beyond the binary16 range is an error rather than an
// Inf that would turn the whole block into NaN.
func scaleHalf(s float32) (bits uint16, v float32, err error) {
	bits = halfBits(s)
	v = halfToFloat(bits)
	if math.IsInf(float64(v), 0) {
		return 0, 0, fmt.Errorf("block scale %g overflows f16 (values too large for the format)", s)
	}
	return bits, v, nil
}

// superScaleHalf rounds a super-block scale to binary16 away from zero, never
// towards it, so that the largest sub-block scale still fits its 6 or 8 bits
// (63 or -128) under the stored value. Rounding to nearest can land just
// below, clipping that sub-block, which matters where d is a binary16
// subnormal (weights of magnitude ~1e-4 and below).
func superScaleHalf(s float32) (bits uint16, v float32, err error) {
	bits, v, err = scaleHalf(s)
	if err == nil && abs32(v) < abs32(s) {
		bits, v, err = scaleHalf(halfToFloat(bits + 1)) // next binary16 away from zero
	}
	return bits, v, err
}

func abs32(v float32) float32 { return max(v, -v) }

// inverse returns 1/s, or 0 for s = 0 so that every value of an all-zero
// block gets level 0.
func inverse(s float32) float64 {
	if s == 0 {
		return 0
	}
	return 1 / float64(s)
}

// quantizeSymmetric quantizes one Q8_0 or Q4_0 block: it fits x ≈ s·q
// (fitSymmetric), stores s as whichever of the two binary16 values around it
// gives the smaller error (rounding to nearest can clip the extreme value
// when binary16 is coarse, as it is for tiny blocks), and writes into q the
// levels for the stored scale. It returns the scale's binary16 bits.
func quantizeSymmetric(x []float32, lo, hi int, q []int8) (uint16, error) {
	s := fitSymmetric(x, lo, hi)
	bits, d, err := scaleHalf(s)
	if err != nil {
		return 0, err
	}
	alt := bits + 1 // the binary16 on the other side of s
	if abs32(d) > abs32(s) {
		alt = bits - 1
	}
	if d != s && alt&0x7fff != 0x7c00 && levelError(x, halfToFloat(alt), lo, hi) < levelError(x, d, lo, hi) {
		bits, d = alt, halfToFloat(alt)
	}
	id := inverse(d)
	for i, v := range x {
		q[i] = int8(roundLevel(float64(v)*id, lo, hi))
	}
	return bits, nil
}

// levelError is Σ(x − d·q)² with every q the nearest level in [lo, hi].
func levelError(x []float32, d float32, lo, hi int) float64 {
	id, flo, fhi := inverse(d), float64(lo), float64(hi)
	var e float64
	for _, v := range x {
		r := float64(v) - float64(d)*nearestLevel(float64(v)*id, flo, fhi)
		e += r * r
	}
	return e
}
