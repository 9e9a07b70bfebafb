package attention

import (
	"fmt"
	"math"

	"github.com/x448/float16"
)

// Problem is one attention computation in the layouts the kernel reads.
type Problem struct {
	Queries, Heads, KVHeads, HeadDim int
	// Pos is the position of query row 0; row i is at Pos+i and attends to
	// keys 0..Pos+i (causal). The KV length is Pos+Queries.
	Pos   int
	Scale float64   // multiplies q·k, usually 1/sqrt(HeadDim)
	Q     []float32 // [Queries][Heads*HeadDim]
	// K and V are f16 bit patterns, row-major [position][KVHeads*HeadDim];
	// rows past the KV length are ignored.
	K, V []uint16
	// Mask, when not nil, is added to the scores: [Queries][MaskStride], -Inf
	// to exclude a key. The kernel reads the mask in f16, so pass values that
	// f16 represents for a like-for-like comparison.
	Mask       []float32
	MaskStride int
}

// Reference computes causal grouped-query attention in float64 and returns
// [Queries][Heads*HeadDim]. Query head h reads KV head h/(Heads/KVHeads). A
// row whose keys are all masked has no softmax; its output is defined as 0,
// as the kernel writes.
func Reference(p Problem) ([]float64, error) {
	d, hd := p.HeadDim, p.Heads*p.HeadDim
	kvLen, kvd := p.Pos+p.Queries, p.KVHeads*p.HeadDim
	switch {
	case p.Queries < 1 || p.KVHeads < 1 || p.Heads%p.KVHeads != 0 || d < 1 || p.Pos < 0:
		return nil, fmt.Errorf("reference: bad shape %+v", p)
	case len(p.Q) < p.Queries*hd:
		return nil, fmt.Errorf("reference: q has %d values, want %d", len(p.Q), p.Queries*hd)
	case len(p.K) < kvLen*kvd || len(p.V) < kvLen*kvd:
		return nil, fmt.Errorf("reference: K/V hold %d/%d values, want %d", len(p.K), len(p.V), kvLen*kvd)
	case p.Mask != nil && (p.MaskStride < kvLen || len(p.Mask) < (p.Queries-1)*p.MaskStride+kvLen):
		return nil, fmt.Errorf("reference: mask stride %d / %d values for KV length %d", p.MaskStride, len(p.Mask), kvLen)
	}
	k := decode(p.K[:kvLen*kvd])
	v := decode(p.V[:kvLen*kvd])
	group := p.Heads / p.KVHeads
	out := make([]float64, p.Queries*hd)
	score := make([]float64, kvLen)
	for i := 0; i < p.Queries; i++ {
		last := p.Pos + i
		for h := 0; h < p.Heads; h++ {
			q := p.Q[i*hd+h*d : i*hd+(h+1)*d]
			off := (h / group) * d
			m := math.Inf(-1)
			for j := 0; j <= last; j++ {
				var s float64
				kr := k[j*kvd+off : j*kvd+off+d]
				for x := range q {
					s += float64(q[x]) * kr[x]
				}
				s *= p.Scale
				if p.Mask != nil {
					s += float64(p.Mask[i*p.MaskStride+j])
				}
				score[j] = s
				m = math.Max(m, s)
			}
			if math.IsInf(m, -1) {
				continue // fully masked: output stays 0
			}
			var l float64
			o := out[i*hd+h*d : i*hd+(h+1)*d]
			for j := 0; j <= last; j++ {
				w := math.Exp(score[j] - m)
				l += w
				vr := v[j*kvd+off : j*kvd+off+d]
				for x := range o {
					o[x] += w * vr[x]
				}
			}
			for x := range o {
				o[x] /= l
			}
		}
	}
	return out, nil
}

func decode(h []uint16) []float64 {
	f := make([]float64, len(h))
	for i, b := range h {
		f[i] = float64(float16.Frombits(b).Float32())
	}
	return f
}

// RelErr compares got with want row by row (rows of width n, one per query
// and head) and returns the largest max|got-want| / max|want| over the rows,
// with rows whose reference is all zero compared absolutely. It is the
// tolerance measure of the kernel tests: an output row is a convex
// combination of V rows, so its scale is the natural unit.
func RelErr(got []float32, want []float64, n int) float64 {
	if len(got) != len(want) {
		return math.Inf(1)
	}
	worst := 0.0
	for r := 0; r+n <= len(want); r += n {
		var diff, scale float64
		for x := r; x < r+n; x++ {
			diff = math.Max(diff, math.Abs(float64(got[x])-want[x]))
			scale = math.Max(scale, math.Abs(want[x]))
		}
		if math.IsNaN(diff) { // math.Max propagates a NaN output
			return math.Inf(1)
		}
		if scale > 0 {
			diff /= scale
		}
		worst = math.Max(worst, diff)
	}
	return worst
}
