package cpu

import (
	"fmt"
	"math"
	"sync"

	"github.com/x448/float16"

	"github.com/vkinfer/vkinfer/backend"
	"github.com/vkinfer/vkinfer/quant"
)

// step is what changes between runs of a recorded program: row i is token
// tokens[i] of sequence seqs[i] at position pos[i].
type step struct {
	tokens, seqs, pos []int32
}

// program records ops as closures and replays them in order.
type program struct {
	b *Backend
	n int
	// rows: rows of several sequences at their own positions
	// (RecordRows), not n consecutive tokens of one. Its products compute every row as a
	// one-token program does (see matmul).
	rows bool
	// seqs and pos are Run's rows, all of sequence 0.
	seqs, pos []int32
	ops       []func(*step)
	outputs   []*tensor
	embeds    []*tensor // tables read by Embed, for the token range check
	// routed holds the id tensors Route writes, with the number of
	// experts routed among: MatMulID reads no others, and only with a
	// weight of as many experts, so every id it reads is in range.
	routed map[*tensor]int
	err    error
}

func (p *program) add(op func(*step)) { p.ops = append(p.ops, op) }

// fail records the first shape error; Record returns it.
func (p *program) fail(format string, args ...any) {
	if p.err == nil {
		p.err = fmt.Errorf("cpu: "+format, args...)
	}
}

func (p *program) Tensor(rows, cols int) backend.Tensor {
	return &tensor{rows: rows, cols: cols, typ: quant.F32, data: make([]float32, rows*cols)}
}

func (p *program) Run(tokens []int32, pos int, out []float32) error {
	if len(tokens) != p.n {
		return fmt.Errorf("cpu: program recorded for %d tokens, run with %d", p.n, len(tokens))
	}
	if pos < 0 || pos+p.n > p.b.cache.Context {
		return fmt.Errorf("cpu: positions %d..%d outside the context of %d", pos, pos+p.n-1, p.b.cache.Context)
	}
	if p.seqs == nil {
		p.seqs, p.pos = make([]int32, p.n), make([]int32, p.n)
	}
	for i := range p.pos {
		p.pos[i] = int32(pos + i)
	}
	return p.RunRows(tokens, p.seqs, p.pos, out)
}

func (p *program) RunRows(tokens, seqs, pos []int32, out []float32) error {
	if err := p.b.cache.CheckRows(p.n, p.rows, tokens, seqs, pos); err != nil {
		return fmt.Errorf("cpu: %w", err)
	}
	for _, tab := range p.embeds {
		for _, t := range tokens {
			if t < 0 || int(t) >= tab.rows {
				return fmt.Errorf("cpu: token id %d outside the vocabulary of %d", t, tab.rows)
			}
		}
	}
	want := 0
	for _, o := range p.outputs {
		want += len(o.data)
	}
	if len(out) != want {
		return fmt.Errorf("cpu: output buffer holds %d values, program produces %d", len(out), want)
	}
	st := &step{tokens: tokens, seqs: seqs, pos: pos}
	for _, op := range p.ops {
		op(st)
	}
	off := 0
	for _, o := range p.outputs {
		off += copy(out[off:], o.data)
	}
	return nil
}

func (p *program) Close() { p.ops, p.outputs = nil, nil }

// parallel runs fn over [0,n) split into contiguous chunks, one per thread,
// when the work (n × cost per item) is large enough to pay for goroutines.
func (p *program) parallel(n, cost int, fn func(lo, hi int)) {
	threads := p.b.threads
	if threads > n {
		threads = n
	}
	if threads <= 1 || n*cost < 1<<15 {
		fn(0, n)
		return
	}
	var wg sync.WaitGroup
	chunk := (n + threads - 1) / threads
	for lo := 0; lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(lo, hi)
		}()
	}
	wg.Wait()
}

func act(t backend.Tensor) *tensor { return t.(*tensor) }

func (p *program) Embed(dst, table backend.Tensor) {
	d, w := act(dst), act(table)
	if d.rows != p.n || d.cols != w.cols {
		p.fail("embed: dst %dx%d for %d tokens of a %d-wide table", d.rows, d.cols, p.n, w.cols)
		return
	}
	p.embeds = append(p.embeds, w)
	p.add(func(st *step) {
		for i, tok := range st.tokens {
			// Sizes were checked at record time; Run checked the token range.
			_ = quant.Dequantize(w.typ, w.rawRow(int(tok)), d.row(i))
		}
	})
}

func (p *program) RMSNorm(dst, x, w backend.Tensor, eps float32) {
	p.rmsNorm("rms_norm", act(dst), act(x), act(w), nil, eps)
}

// RMSNormAdd is RMSNorm with the residual r added to each value.
func (p *program) RMSNormAdd(dst, x, w, r backend.Tensor, eps float32) {
	res := act(r)
	if s := act(x); res.rows != s.rows || res.cols != s.cols {
		p.fail("rms_norm_add: residual %dx%d, x %dx%d", res.rows, res.cols, s.rows, s.cols)
		return
	}
	p.rmsNorm("rms_norm_add", act(dst), act(x), act(w), res, eps)
}

// rmsNorm records dst = RMSNorm(x)·w, plus r where r is not nil. The sum of
// squares accumulates in f64; each value is rounded to f32 before r is
// added, so the fused op gives exactly RMSNorm then Add. Every value of a
// row is read before it is written, so dst may be x or r.
func (p *program) rmsNorm(op string, d, s, g, r *tensor, eps float32) {
	if d.rows != s.rows || d.cols != s.cols || len(g.data) != s.cols {
		p.fail("%s: shapes %dx%d, %dx%d, weight %d", op, d.rows, d.cols, s.rows, s.cols, len(g.data))
		return
	}
	p.add(func(*step) {
		for i := range s.rows {
			in, o := s.row(i), d.row(i)
			var ss float64
			for _, v := range in {
				ss += float64(v) * float64(v)
			}
			scale := float32(1 / math.Sqrt(ss/float64(len(in))+float64(eps)))
			if r == nil {
				for j, v := range in {
					o[j] = v * scale * g.data[j]
				}
				continue
			}
			res := r.row(i)
			for j, v := range in {
				// The conversion forbids fusing the product into the
				// add (Go may use an FMA otherwise): Add rounds it first.
				o[j] = res[j] + float32(v*scale*g.data[j])
			}
		}
	})
}

func (p *program) MatMul(dst, w, x backend.Tensor) { p.matmul(act(dst), act(w), act(x), nil) }

func (p *program) MatMulAdd(dst, w, x, r backend.Tensor) {
	res := act(r)
	if d := act(dst); res.rows != d.rows || res.cols != d.cols {
		p.fail("matmul_add: residual %dx%d, dst %dx%d", res.rows, res.cols, d.rows, d.cols)
		return
	}
	p.matmul(act(dst), act(w), act(x), res)
}

// matmul records d = m·a (+ res when not nil); each value of res is read
// just before the same value of d is written, so d may be res.
func (p *program) matmul(d, m, a, res *tensor) {
	if a.cols != m.cols || d.rows != a.rows || d.cols != m.rows {
		p.fail("matmul: weight %dx%d, x %dx%d, dst %dx%d", m.rows, m.cols, a.rows, a.cols, d.rows, d.cols)
		return
	}
	set := func(i int, v float32) {
		if res != nil {
			v += res.data[i]
		}
		d.data[i] = v
	}
	p.add(func(*step) {
		p.parallel(m.rows, m.cols*a.rows, func(lo, hi int) {
			if m.data != nil { // F32 weights: no decoding at all
				for r := lo; r < hi; r++ {
					wr := m.data[r*m.cols : (r+1)*m.cols]
					for i := range a.rows {
						set(i*d.cols+r, dot(wr, a.row(i)))
					}
				}
				return
			}
			if a.rows == 1 || p.rows {
				// A row program's rows are sequences each decoding one
				// token: computed as a one-token program computes its row,
				// a sequence's logits do not depend on which others share
				// its pass (the server's streams equal their output alone),
				// at the cost of decoding the weights once per row.
				for r := lo; r < hi; r++ {
					wr := m.rawRow(r)
					for i := range a.rows {
						set(i*d.cols+r, quant.Dot(m.typ, wr, a.row(i)))
					}
				}
				return
			}
			// Several tokens: dequantize each weight row once and reuse it.
			buf := make([]float32, m.cols)
			for r := lo; r < hi; r++ {
				_ = quant.Dequantize(m.typ, m.rawRow(r), buf)
				for i := range a.rows {
					set(i*d.cols+r, dot(buf, a.row(i)))
				}
			}
		})
	})
}

// dot is Σ a[i]·b[i] over len(a) values with four independent sums, so the
// adds pipeline; the re-slices let the compiler drop the bounds checks.
func dot(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	for len(a) >= 4 {
		x, y := a[:4:4], b[:4:4]
		s0 += x[0] * y[0]
		s1 += x[1] * y[1]
		s2 += x[2] * y[2]
		s3 += x[3] * y[3]
		a, b = a[4:], b[4:]
	}
	for i := range a {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

func (p *program) AddBias(x, b backend.Tensor) {
	s, g := act(x), act(b)
	if len(g.data) != s.cols {
		p.fail("add_bias: bias of %d for rows of %d", len(g.data), s.cols)
		return
	}
	p.add(func(*step) {
		for i := range s.rows {
			r := s.row(i)
			for j := range r {
				r[j] += g.data[j]
			}
		}
	})
}

func (p *program) Add(dst, a, b backend.Tensor) {
	d, x, y := act(dst), act(a), act(b)
	if len(d.data) != len(x.data) || len(x.data) != len(y.data) {
		p.fail("add: sizes %d, %d, %d", len(d.data), len(x.data), len(y.data))
		return
	}
	p.add(func(*step) {
		for i := range d.data {
			d.data[i] = x.data[i] + y.data[i]
		}
	})
}

func (p *program) RoPE(x backend.Tensor, r backend.RoPE) {
	s := act(x)
	if s.cols != r.Heads*r.HeadDim || r.Dims > r.HeadDim || r.Dims%2 != 0 {
		p.fail("rope: row of %d for %d heads of %d, %d rotated dims", s.cols, r.Heads, r.HeadDim, r.Dims)
		return
	}
	var factors []float32
	if r.Factors != nil {
		factors = act(r.Factors).data
		if len(factors) != r.Dims/2 {
			p.fail("rope: %d frequency factors for %d rotated dims", len(factors), r.Dims)
			return
		}
	}
	half := r.Dims / 2
	// inv[k] is the angular speed of pair k: base^(-2k/dims) / factor[k].
	inv := make([]float64, half)
	for k := range half {
		inv[k] = math.Pow(float64(r.Base), -2*float64(k)/float64(r.Dims))
		if factors != nil {
			inv[k] /= float64(factors[k])
		}
	}
	p.add(func(st *step) {
		for i := range s.rows {
			pos := float64(st.pos[i]) * float64(r.Scale)
			row := s.row(i)
			for h := range r.Heads {
				head := row[h*r.HeadDim : (h+1)*r.HeadDim]
				for k := range half {
					sin, cos := math.Sincos(pos * inv[k])
					a, b := 2*k, 2*k+1 // adjacent pairs (GPT-J / llama style)
					if r.NeoX {
						a, b = k, k+half
					}
					x0, x1 := float64(head[a]), float64(head[b])
					head[a] = float32(x0*cos - x1*sin)
					head[b] = float32(x0*sin + x1*cos)
				}
			}
		}
	})
}

// StoreKV writes row i, position p of sequence s, into slot p mod
// Slots(layer) of s's region: for a global layer that is slot p, for a
// sliding one its ring.
func (p *program) StoreKV(layer int, k, v backend.Tensor, rope *backend.RoPE) {
	if rope != nil {
		p.RoPE(k, *rope)
	}
	kt, vt := act(k), act(v)
	c := p.b.cache
	if layer < 0 || layer >= c.Layers || kt.cols != c.KVDim || vt.cols != c.KVDim || kt.rows != p.n || vt.rows != p.n {
		p.fail("store_kv: layer %d of %d, k %dx%d, v %dx%d, cache rows of %d", layer, c.Layers, kt.rows, kt.cols, vt.rows, vt.cols, c.KVDim)
		return
	}
	slots := c.Slots(layer)
	if !p.rows && p.n > slots {
		p.fail("store_kv: a batch of %d tokens into layer %d's ring of %d slots", p.n, layer, slots)
		return
	}
	p.add(func(st *step) {
		for i := range p.n {
			off := (int(st.seqs[i])*slots + int(st.pos[i])%slots) * c.KVDim
			kd, vd := p.b.k[layer][off:off+c.KVDim], p.b.v[layer][off:off+c.KVDim]
			copy(kd, kt.row(i))
			copy(vd, vt.row(i))
			if p.b.F16KV {
				for j := range kd {
					kd[j] = float16.Fromfloat32(kd[j]).Float32()
					vd[j] = float16.Fromfloat32(vd[j]).Float32()
				}
			}
		}
	})
}

// Attend reads the keys and values of position t of row i's sequence from
// slot t mod Slots(layer) of its region, the mapping StoreKV writes.
func (p *program) Attend(dst, q backend.Tensor, layer int, a backend.Attention) {
	d, qt := act(dst), act(q)
	c := p.b.cache
	if a.KVHeads <= 0 || a.Heads%a.KVHeads != 0 || qt.cols != a.Heads*a.HeadDim || d.cols != qt.cols || d.rows != qt.rows ||
		a.KVHeads*a.HeadDim != c.KVDim || layer < 0 || layer >= c.Layers {
		p.fail("attention: q %dx%d for %d heads (%d KV) of %d, cache rows of %d", qt.rows, qt.cols, a.Heads, a.KVHeads, a.HeadDim, c.KVDim)
		return
	}
	if err := c.CheckWindow(layer, c.PerSeq(qt.rows, p.rows), a.Window); err != nil {
		p.fail("attention: %v", err)
		return
	}
	group := a.Heads / a.KVHeads
	slots := c.Slots(layer)
	p.add(func(st *step) {
		keys, vals := p.b.k[layer], p.b.v[layer]
		span := 0 // the most keys a row sees
		for _, pos := range st.pos {
			span = max(span, int(pos)+1)
		}
		if a.Window > 0 {
			span = min(span, a.Window)
		}
		p.parallel(qt.rows*a.Heads, span*a.HeadDim*2, func(lo, hi int) {
			scores := make([]float64, span)
			acc := make([]float64, a.HeadDim)
			for job := lo; job < hi; job++ {
				i, h := job/a.Heads, job%a.Heads
				kvOff := (h / group) * a.HeadDim
				qh := qt.row(i)[h*a.HeadDim : (h+1)*a.HeadDim]
				// Row i at position p sees positions first..p of its
				// sequence.
				last := int(st.pos[i])
				region := int(st.seqs[i]) * slots * c.KVDim
				first := 0
				if a.Window > 0 {
					first = max(0, last-a.Window+1)
				}
				at := func(buf []float32, t int) []float32 {
					off := region + t%slots*c.KVDim + kvOff
					return buf[off : off+a.HeadDim]
				}
				mx := math.Inf(-1)
				for t := first; t <= last; t++ {
					s := float64(dot(qh, at(keys, t))) * float64(a.Scale)
					scores[t-first] = s
					mx = max(mx, s)
				}
				clear(acc)
				var sum float64
				for t := first; t <= last; t++ {
					e := math.Exp(scores[t-first] - mx)
					sum += e
					for j, v := range at(vals, t) {
						acc[j] += e * float64(v)
					}
				}
				o := d.row(i)[h*a.HeadDim : (h+1)*a.HeadDim]
				for j := range o {
					o[j] = float32(acc[j] / sum)
				}
			}
		})
	})
}

// HeadNorm is RMSNorm over each head of each row.
func (p *program) HeadNorm(x, w backend.Tensor, headDim int, eps float32) {
	s, g := act(x), act(w)
	if headDim <= 0 || s.cols%headDim != 0 || len(g.data) != headDim {
		p.fail("head_norm: rows of %d in heads of %d, weight %d", s.cols, headDim, len(g.data))
		return
	}
	p.add(func(*step) {
		for off := 0; off < len(s.data); off += headDim {
			head := s.data[off : off+headDim]
			var ss float64
			for _, v := range head {
				ss += float64(v) * float64(v)
			}
			scale := float32(1 / math.Sqrt(ss/float64(headDim)+float64(eps)))
			for j, v := range head {
				head[j] = v * scale * g.data[j]
			}
		}
	})
}

func (p *program) SwiGLU(dst, gate, up backend.Tensor) {
	p.glu("swiglu", dst, gate, up, func(x float32) float32 { return x / (1 + float32(math.Exp(-float64(x)))) })
}

// GeGLU evaluates gelu in float64; llama.cpp's CPU backend reads it from
// a table of f16 inputs, its GPU backends compute it as here.
func (p *program) GeGLU(dst, gate, up backend.Tensor) {
	p.glu("geglu", dst, gate, up, func(x float32) float32 { return float32(gelu(float64(x))) })
}

// glu sets dst = f(gate) * up.
func (p *program) glu(name string, dst, gate, up backend.Tensor, f func(float32) float32) {
	d, g, u := act(dst), act(gate), act(up)
	if len(d.data) != len(g.data) || len(g.data) != len(u.data) {
		p.fail("%s: sizes %d, %d, %d", name, len(d.data), len(g.data), len(u.data))
		return
	}
	p.add(func(*step) {
		for i, x := range g.data {
			d.data[i] = f(x) * u.data[i]
		}
	})
}

// gelu is ggml_gelu's tanh approximation, 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
func gelu(x float64) float64 {
	const sqrt2OverPi = 0.79788456080286535587989211986876
	return 0.5 * x * (1 + math.Tanh(sqrt2OverPi*x*(1+0.044715*x*x)))
}

func (p *program) Scale(x backend.Tensor, s float32) {
	t := act(x)
	p.add(func(*step) {
		for i := range t.data {
			t.data[i] *= s
		}
	})
}

func (p *program) CopyRows(dst, x backend.Tensor, first int) {
	d, s := act(dst), act(x)
	if d.cols != s.cols || first < 0 || first+d.rows > s.rows {
		p.fail("copy_rows: %d rows from %d of a %dx%d tensor into %dx%d", d.rows, first, s.rows, s.cols, d.rows, d.cols)
		return
	}
	p.add(func(*step) { copy(d.data, s.data[first*s.cols:(first+d.rows)*s.cols]) })
}

func (p *program) Output(t backend.Tensor) { p.outputs = append(p.outputs, act(t)) }
