package quant

import (
	"encoding/binary"
	"math"
)

// Q4_K and Q5_K share the header of their 256-value super-blocks:
//
//	d      f16       bytes 0..1    scale of the sub-block scales
//	dmin   f16       bytes 2..3    scale of the sub-block mins
//	scales [12]byte  bytes 4..15   eight 6-bit (scale, min) pairs, one per
//	                               32-value sub-block; sub-block j holds
//	                               x = d·scale_j·q − dmin·min_j
//
// The 6-bit pairs are packed as ggml's get_scale_min_k4 reads them: pairs
// 0..3 sit in the low 6 bits of bytes 0..3 (scales) and 4..7 (mins); pairs
// 4..7 keep their low 4 bits in the nibbles of bytes 8..11 (scale low, min
// high) and their top 2 bits in the top 2 bits of bytes 0..3 (scales) and
// 4..7 (mins).
const (
	kValues    = 256
	kSubValues = 32
	kHeader    = 16
)

// kLevels maps a Q4_K / Q5_K level (0..31) to its float value: a table load
// is cheaper than an int→float conversion in the dot products.
var kLevels = func() (t [32]float32) {
	for i := range t {
		t[i] = float32(i)
	}
	return t
}()

// unpackKScales returns the eight 6-bit scales and mins of a K header.
func unpackKScales(p *[12]byte) (sc, mn [8]uint8) {
	for j := range 4 {
		sc[j] = p[j] & 63
		mn[j] = p[j+4] & 63
		sc[j+4] = p[j+8]&15 | p[j]>>6<<4
		mn[j+4] = p[j+8]>>4 | p[j+4]>>6<<4
	}
	return sc, mn
}

// packKScales is the inverse of unpackKScales; every input must be < 64.
func packKScales(sc, mn *[8]uint8) (p [12]byte) {
	for j := range 4 {
		p[j] = sc[j] | sc[j+4]>>4<<6
		p[j+4] = mn[j] | mn[j+4]>>4<<6
		p[j+8] = sc[j+4]&15 | mn[j+4]&15<<4
	}
	return p
}

// nearestKPair returns the 6-bit (scale, min) pair, among the rounded fit
// (sc, mn) and its neighbours ±1, under which x quantizes with the least
// squared error. Rounding the fitted pair to the nearest 6-bit values
// independently ignores how the levels then fall; the neighbour search cut
// Q4_K's error by about 1% (on the stories260K weights, from up to 1.8%
// above llama.cpp's to at most 0.2% above) for 9 more level roundings per
// value. The same search over Q6_K's 8-bit scales gained only 0.3%.
func nearestKPair(x []float32, nmax int, d, dmin float32, sc, mn int) (uint8, uint8) {
	bestS, bestM, best := sc, mn, math.Inf(1)
	for cs := max(sc-1, 0); cs <= min(sc+1, 63); cs++ {
		for cm := max(mn-1, 0); cm <= min(mn+1, 63); cm++ {
			if e := affineLevelError(x, d*float32(cs), dmin*float32(cm), nmax); e < best {
				bestS, bestM, best = cs, cm, e
			}
		}
	}
	return uint8(bestS), uint8(bestM)
}

// affineLevelError is Σ(x − (a·q − b))² with every q the nearest level in
// [0, nmax].
func affineLevelError(x []float32, a, b float32, nmax int) float64 {
	ia, fmax := inverse(a), float64(nmax)
	var e float64
	for _, v := range x {
		r := float64(v) - (float64(a)*nearestLevel((float64(v)+float64(b))*ia, 0, fmax) - float64(b))
		e += r * r
	}
	return e
}

// kHeaderValues decodes a K header into the per-sub-block factors of
// x = a[j]·q − b[j]. (Results go through pointers: it runs once per block
// of the dot product and is too large to inline, so returned arrays would
// be copied.)
func kHeaderValues(h *[kHeader]byte, a, b *[8]float32) {
	d, dmin := loadHalf(h[0:]), loadHalf(h[2:])
	sc, mn := unpackKScales((*[12]byte)(h[4:]))
	for j := range 8 {
		a[j] = d * float32(sc[j])
		b[j] = dmin * float32(mn[j])
	}
}

// quantizeKSuper quantizes one 256-value super-block with levels 0..nmax
// (15 for Q4_K, 31 for Q5_K): it fits each sub-block's scale and min by
// least squares (fitAffine), sets d and dmin (f16) so that the largest scale
// and the largest min are 63 of them, rounds every sub-block's pair to 6
// bits against d and dmin, writes the header, and finally rounds every value
// to its level under the scale and min as stored, so the levels fit what a
// reader will decode rather than the unrounded fit.
func quantizeKSuper(x *[kValues]float32, nmax int, h *[kHeader]byte, q *[kValues]uint8) error {
	var s, m [8]float32
	var maxS, maxM float32
	for j := range 8 {
		s[j], m[j] = fitAffine(x[kSubValues*j:kSubValues*(j+1)], nmax)
		maxS, maxM = max(maxS, s[j]), max(maxM, m[j])
	}
	dBits, d, err := superScaleHalf(maxS / 63)
	if err != nil {
		return err
	}
	mBits, dmin, err := superScaleHalf(maxM / 63)
	if err != nil {
		return err
	}
	var sc, mn [8]uint8
	id, im := inverse(d), inverse(dmin)
	for j := range 8 {
		sc[j], mn[j] = nearestKPair(x[kSubValues*j:kSubValues*(j+1)], nmax, d, dmin,
			roundLevel(float64(s[j])*id, 0, 63), roundLevel(float64(m[j])*im, 0, 63))
	}
	binary.LittleEndian.PutUint16(h[0:], dBits)
	binary.LittleEndian.PutUint16(h[2:], mBits)
	*(*[12]byte)(h[4:]) = packKScales(&sc, &mn)

	var a, b [8]float32
	kHeaderValues(h, &a, &b)
	for j := range 8 {
		ia := inverse(a[j])
		for l := range kSubValues {
			i := kSubValues*j + l
			q[i] = uint8(roundLevel((float64(x[i])+float64(b[j]))*ia, 0, nmax))
		}
	}
	return nil
}
