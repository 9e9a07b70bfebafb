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
	// the keys at positions First(Pos+i) .. Pos+i (causal).
	Pos int
	// Window, when above 0, limits row i to the Window latest positions:
	// a key at position k is masked when Pos+i-k >= Window (llama.cpp's
	// standard sliding window). 0 is causal over all earlier positions.
	Window int
	// Slots is the rows of the K and V caches, a ring: position k lives in
	// row k mod Slots. 0 means Pos+Queries rows (the whole sequence: no
	// position wraps). A ring holds only the Slots latest positions, so a
	// row never sees a position before Pos+Queries-Slots, which the batch's
	// later rows have overwritten (see First).
	Slots int
	Scale float64   // multiplies q·k, usually 1/sqrt(HeadDim)
	Q     []float32 // [Queries][Heads*HeadDim]
	// K and V are f16 bit patterns, [row][KVHeads*HeadDim] (a row per slot);
	// rows past Slots are ignored.
	K, V []uint16
	// Mask, when not nil, is added to the scores: [Queries][MaskStride], the
	// entry for the key at position k in column k mod Slots (as the cache
	// row), -Inf to exclude it. The kernel reads the mask in f16, so pass
	// values that f16 represents for a like-for-like comparison.
	Mask       []float32
	MaskStride int
}

// slots is the ring's size: Slots, or the whole sequence.
func (p Problem) slots() int {
	if p.Slots > 0 {
		return p.Slots
	}
	return p.Pos + p.Queries
}

// First is the earliest key position a query at position q sees: the
// start of its window, and never a position the ring no longer holds
// (after the batch's rows are stored it holds the Slots positions up to
// Pos+Queries-1). Where the ring is at least Window+Queries-1 slots, or
// no position has wrapped yet, only the window decides.
func (p Problem) First(q int) int {
	first := max(0, p.Pos+p.Queries-p.slots())
	if p.Window > 0 {
		first = max(first, q-p.Window+1)
	}
	return first
}

// Reference computes causal grouped-query attention in float64 and returns
// [Queries][Heads*HeadDim]. Query head h reads KV head h/(Heads/KVHeads);
// row i sees the keys at positions First(Pos+i) .. Pos+i, each in cache
// row position mod Slots. A row whose keys are all masked has no softmax;
// its output is defined as 0, as the kernel writes.
func Reference(p Problem) ([]float64, error) {
	d, hd := p.HeadDim, p.Heads*p.HeadDim
	rows, kvd := p.slots(), p.KVHeads*p.HeadDim
	switch {
	case p.Queries < 1 || p.KVHeads < 1 || p.Heads%p.KVHeads != 0 || d < 1 || p.Pos < 0 || p.Window < 0 || p.Slots < 0:
		return nil, fmt.Errorf("reference: bad shape %+v", p)
	case p.Slots > 0 && p.Slots < p.Queries:
		return nil, fmt.Errorf("reference: a ring of %d slots cannot hold a batch of %d", p.Slots, p.Queries)
	case len(p.Q) < p.Queries*hd:
		return nil, fmt.Errorf("reference: q has %d values, want %d", len(p.Q), p.Queries*hd)
	case len(p.K) < rows*kvd || len(p.V) < rows*kvd:
		return nil, fmt.Errorf("reference: K/V hold %d/%d values, want %d", len(p.K), len(p.V), rows*kvd)
	case p.Mask != nil && (p.MaskStride < rows || len(p.Mask) < (p.Queries-1)*p.MaskStride+rows):
		return nil, fmt.Errorf("reference: mask stride %d / %d values for %d cache rows", p.MaskStride, len(p.Mask), rows)
	}
	k := decode(p.K[:rows*kvd])
	v := decode(p.V[:rows*kvd])
	group := p.Heads / p.KVHeads
	out := make([]float64, p.Queries*hd)
	score := make([]float64, rows)
	for i := 0; i < p.Queries; i++ {
		first, last := p.First(p.Pos+i), p.Pos+i
		for h := 0; h < p.Heads; h++ {
			q := p.Q[i*hd+h*d : i*hd+(h+1)*d]
			off := (h / group) * d
			m := math.Inf(-1)
			for j := first; j <= last; j++ {
				r := j % rows
				var s float64
				kr := k[r*kvd+off : r*kvd+off+d]
				for x := range q {
					s += float64(q[x]) * kr[x]
				}
				s *= p.Scale
				if p.Mask != nil {
					s += float64(p.Mask[i*p.MaskStride+r])
				}
				score[j-first] = s
				m = math.Max(m, s)
			}
			if math.IsInf(m, -1) {
				continue // fully masked: output stays 0
			}
			var l float64
			o := out[i*hd+h*d : i*hd+(h+1)*d]
			for j := first; j <= last; j++ {
				w := math.Exp(score[j-first] - m)
				l += w
				r := j % rows
				vr := v[r*kvd+off : r*kvd+off+d]
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
