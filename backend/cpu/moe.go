package cpu

import (
	"math"

	"github.com/vkinfer/vkinfer/backend"
	"github.com/vkinfer/vkinfer/quant"
)

// moeSumMin is the least sum of the chosen probabilities Route divides by,
// llama.cpp's clamp (the smallest normal f16) against a division by zero.
const moeSumMin = 6.103515625e-5

// Route is the router product, then softmax, top-k and (with norm)
// renormalisation, per row. The softmax rounds as ggml's CPU soft_max: each exp in f32, their sum in f64,
// each probability the f32 exp times the f32 reciprocal of the sum.
func (p *program) Route(ids, weights, logits, router, x backend.Tensor, k int, norm bool) {
	p.MatMul(logits, router, x)
	id, w, l := act(ids), act(weights), act(logits)
	if k < 1 || k > l.cols || id.rows != l.rows || w.rows != l.rows || id.cols != k || w.cols != k {
		p.fail("route: top %d of logits %dx%d into ids %dx%d and weights %dx%d", k, l.rows, l.cols, id.rows, id.cols, w.rows, w.cols)
		return
	}
	p.routed[id] = l.cols
	probs := make([]float32, l.cols)
	p.add(func(*step) {
		for i := range l.rows {
			softmax(probs, l.row(i))
			topK(id.row(i), w.row(i), probs, norm)
		}
	})
}

// softmax sets p = softmax(x) as ggml's CPU soft_max rounds it: each
// exp(x−max) in f32, their sum in f64, each value the f32 exp times the
// f32 reciprocal of the sum.
func softmax(p, x []float32) {
	mx := float32(math.Inf(-1))
	for _, v := range x {
		mx = max(mx, v)
	}
	var sum float64
	for j, v := range x {
		p[j] = float32(math.Exp(float64(v - mx)))
		sum += float64(p[j])
	}
	inv := float32(1 / sum)
	for j := range p {
		p[j] *= inv
	}
}

// topK writes into ids (as f32 integers) the len(ids) indexes of the
// largest probs in descending order, ties to the lower index, and into w
// their probabilities, divided by their f32 sum (clamped below at
// moeSumMin) when norm.
func topK(ids, w, probs []float32, norm bool) {
	for j := range ids {
		best := -1
		for e, v := range probs {
			if taken(ids[:j], e) {
				continue
			}
			if best < 0 || v > probs[best] {
				best = e
			}
		}
		ids[j], w[j] = float32(best), probs[best]
	}
	if !norm {
		return
	}
	var sum float32
	for _, v := range w {
		sum += v
	}
	sum = max(sum, moeSumMin)
	for j := range w {
		w[j] /= sum
	}
}

// taken says whether expert e is among ids.
func taken(ids []float32, e int) bool {
	for _, v := range ids {
		if int(v) == e {
			return true
		}
	}
	return false
}

// MatMulID multiplies each token's input by its chosen experts' matrices,
// reading only those experts' rows: expert by expert, each row decoded
// once for all the slots that chose the expert (one quant.Dot where only
// one did, as MatMul does in decode).
func (p *program) MatMulID(dst, w, x, ids backend.Tensor) {
	d, m, a, id := act(dst), act(w), act(x), act(ids)
	k, n := id.cols, id.rows
	if d.cols == 0 || m.rows != p.routed[id]*d.cols || d.rows != n*k || a.cols != m.cols || (a.rows != n && a.rows != n*k) {
		p.fail("mul_mat_id: experts %dx%d, x %dx%d, ids %dx%d routing among %d experts (0: not written by Route), dst %dx%d",
			m.rows, m.cols, a.rows, a.cols, id.rows, id.cols, p.routed[id], d.rows, d.cols)
		return
	}
	rows := d.cols
	slots := make([][]int, p.routed[id]) // per expert, the slots i·k+j that chose it
	p.add(func(*step) {
		for e := range slots {
			slots[e] = slots[e][:0]
		}
		for s, v := range id.data {
			// Route wrote every id, among as many experts as w holds
			// (Record checked), so each is in range.
			slots[int(v)] = append(slots[int(v)], s)
		}
		input := func(s int) []float32 {
			if a.rows == n {
				return a.row(s / k)
			}
			return a.row(s)
		}
		for e, ss := range slots {
			if len(ss) == 0 {
				continue
			}
			p.parallel(rows, m.cols*len(ss), func(lo, hi int) {
				var buf []float32
				if m.data == nil && len(ss) > 1 {
					buf = make([]float32, m.cols)
				}
				for r := lo; r < hi; r++ {
					wr := e*rows + r
					switch {
					case m.data != nil:
						buf = m.data[wr*m.cols : (wr+1)*m.cols]
					case len(ss) == 1:
						d.data[ss[0]*rows+r] = quant.Dot(m.typ, m.rawRow(wr), input(ss[0]))
						continue
					default:
						_ = quant.Dequantize(m.typ, m.rawRow(wr), buf)
					}
					for _, s := range ss {
						d.data[s*rows+r] = dot(buf, input(s))
					}
				}
			})
		}
	})
}

// MoESum mixes the experts' outputs and adds the residual, in llama.cpp's
// order: products rounded to f32, summed in slot order, then the residual.
func (p *program) MoESum(dst, y, weights, r backend.Tensor) {
	d, ys, w, res := act(dst), act(y), act(weights), act(r)
	k := w.cols
	if res.rows != d.rows || res.cols != d.cols || w.rows != d.rows || ys.rows != d.rows*k || ys.cols != d.cols {
		p.fail("moe_sum: dst %dx%d, experts' outputs %dx%d, weights %dx%d, residual %dx%d",
			d.rows, d.cols, ys.rows, ys.cols, w.rows, w.cols, res.rows, res.cols)
		return
	}
	p.add(func(*step) {
		for i := range d.rows {
			wi, ri, di := w.row(i), res.row(i), d.row(i)
			for c := range di {
				var s float32
				for j, wj := range wi {
					s += float32(wj * ys.data[(i*k+j)*d.cols+c])
				}
				di[c] = s + ri[c]
			}
		}
	})
}
