package cpu

import (
	"fmt"
	"math"
	"sync"

	"github.com/x448/float16"

	"github.com/vkinfer/vkinfer/backend"
	"github.com/vkinfer/vkinfer/quant"
)

// step is what changes between runs of a recorded program.
type step struct {
	tokens []int32
	pos    int
}

// program records ops as closures and replays them in order.
type program struct {
	b       *Backend
	n       int
	ops     []func(*step)
	outputs []*tensor
	embeds  []*tensor // tables read by Embed, for the token range check
	err     error
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
	st := &step{tokens: tokens, pos: pos}
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
	d, s, g := act(dst), act(x), act(w)
	if d.rows != s.rows || d.cols != s.cols || len(g.data) != s.cols {
		p.fail("rms_norm: shapes %dx%d, %dx%d, weight %d", d.rows, d.cols, s.rows, s.cols, len(g.data))
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
			for j, v := range in {
				o[j] = v * scale * g.data[j]
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
			if a.rows == 1 {
				xr := a.row(0)
				for r := lo; r < hi; r++ {
					set(r, quant.Dot(m.typ, m.rawRow(r), xr))
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
			pos := float64(st.pos+i) * float64(r.Scale)
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
	p.add(func(st *step) {
		kd, vd := p.b.k[layer][st.pos*c.KVDim:], p.b.v[layer][st.pos*c.KVDim:]
		copy(kd, kt.data)
		copy(vd, vt.data)
		if p.b.F16KV {
			for i := range kt.data {
				kd[i] = float16.Fromfloat32(kd[i]).Float32()
				vd[i] = float16.Fromfloat32(vd[i]).Float32()
			}
		}
	})
}

func (p *program) Attend(dst, q backend.Tensor, layer int, a backend.Attention) {
	d, qt := act(dst), act(q)
	c := p.b.cache
	if a.KVHeads <= 0 || a.Heads%a.KVHeads != 0 || qt.cols != a.Heads*a.HeadDim || d.cols != qt.cols || d.rows != qt.rows ||
		a.KVHeads*a.HeadDim != c.KVDim || layer < 0 || layer >= c.Layers {
		p.fail("attention: q %dx%d for %d heads (%d KV) of %d, cache rows of %d", qt.rows, qt.cols, a.Heads, a.KVHeads, a.HeadDim, c.KVDim)
		return
	}
	group := a.Heads / a.KVHeads
	p.add(func(st *step) {
		keys, vals := p.b.k[layer], p.b.v[layer]
		p.parallel(qt.rows*a.Heads, (st.pos+qt.rows)*a.HeadDim*2, func(lo, hi int) {
			scores := make([]float64, st.pos+qt.rows)
			acc := make([]float64, a.HeadDim)
			for job := lo; job < hi; job++ {
				i, h := job/a.Heads, job%a.Heads
				kvOff := (h / group) * a.HeadDim
				qh := qt.row(i)[h*a.HeadDim : (h+1)*a.HeadDim]
				n := st.pos + i + 1 // causal: positions 0..pos+i
				mx := math.Inf(-1)
				for t := range n {
					kr := keys[t*c.KVDim+kvOff : t*c.KVDim+kvOff+a.HeadDim]
					s := float64(dot(qh, kr)) * float64(a.Scale)
					scores[t] = s
					mx = max(mx, s)
				}
				clear(acc)
				var sum float64
				for t := range n {
					e := math.Exp(scores[t] - mx)
					sum += e
					vr := vals[t*c.KVDim+kvOff : t*c.KVDim+kvOff+a.HeadDim]
					for j, v := range vr {
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

func (p *program) SwiGLU(dst, gate, up backend.Tensor) {
	d, g, u := act(dst), act(gate), act(up)
	if len(d.data) != len(g.data) || len(g.data) != len(u.data) {
		p.fail("swiglu: sizes %d, %d, %d", len(d.data), len(g.data), len(u.data))
		return
	}
	p.add(func(*step) {
		for i, x := range g.data {
			d.data[i] = x / (1 + float32(math.Exp(-float64(x)))) * u.data[i]
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
