package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/vkinfer/vkinfer/backend"
)

// randTable places an F32 weight of rows×cols random values in [-r, r) and
// returns it with its values.
func randTable(t *testing.T, b *Backend, rng *rand.Rand, rows, cols int, r float32) (backend.Tensor, []float32) {
	t.Helper()
	v := make([]float32, rows*cols)
	for i := range v {
		v[i] = (2*rng.Float32() - 1) * r
	}
	return f32Weight(t, b, rows, cols, v), v
}

// runOnce records build for n tokens, runs it on tokens 0..n-1 at position
// 0 and returns its outputs.
func runOnce(t *testing.T, b *Backend, n, outLen int, build func(backend.Ops)) []float32 {
	t.Helper()
	p, err := b.Record(n, build)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	toks := make([]int32, n)
	for i := range toks {
		toks[i] = int32(i)
	}
	out := make([]float32, outLen)
	if err := p.Run(toks, 0, out); err != nil {
		t.Fatal(err)
	}
	return out
}

func newBackend(t *testing.T) *Backend {
	t.Helper()
	b := New(2)
	if err := b.InitCache(backend.Cache{Layers: 1, Context: 8, KVDim: 2}); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestHeadNorm checks per-head RMS normalisation against the formula, for
// head dims of real models and odd ones, with one weight shared by all heads.
func TestHeadNorm(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const eps = 1e-6
	for _, hd := range []int{1, 7, 33, 64, 128, 256} {
		for _, heads := range []int{1, 3} {
			t.Run(fmt.Sprintf("dim%d/heads%d", hd, heads), func(t *testing.T) {
				b := newBackend(t)
				const n = 3
				table, in := randTable(t, b, rng, n, heads*hd, 4)
				w, wv := randTable(t, b, rng, 1, hd, 2)
				out := runOnce(t, b, n, n*heads*hd, func(o backend.Ops) {
					x := o.Tensor(n, heads*hd)
					o.Embed(x, table)
					o.HeadNorm(x, w, hd, eps)
					o.Output(x)
				})
				for h := 0; h < n*heads; h++ {
					run := in[h*hd : (h+1)*hd]
					var ss float64
					for _, v := range run {
						ss += float64(v) * float64(v)
					}
					r := math.Sqrt(ss/float64(hd) + eps)
					for j, v := range run {
						want := float64(v) / r * float64(wv[j])
						if got := float64(out[h*hd+j]); math.Abs(got-want) > 1e-5*max(1, math.Abs(want)) {
							t.Fatalf("head %d value %d: %v, want %v", h, j, got, want)
						}
					}
				}
			})
		}
	}
}

// TestRMSNormAdd checks the fused post-norm and residual add against
// RMSNorm then Add, which it must match bit for bit (the model's golden
// outputs were made with the two ops), with dst the residual (as the model
// records it), dst the normalised input, and dst a tensor of its own.
func TestRMSNormAdd(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const eps = 1e-6
	for _, cols := range []int{1, 7, 255, 2560} {
		for _, n := range []int{1, 3, 8} { // newBackend's context holds 8 positions
			for _, alias := range []string{"r", "x", "none"} {
				t.Run(fmt.Sprintf("%dx%d/dst=%s", n, cols, alias), func(t *testing.T) {
					b := newBackend(t)
					xt, _ := randTable(t, b, rng, n, cols, 4)
					rt, _ := randTable(t, b, rng, n, cols, 50)
					w, _ := randTable(t, b, rng, 1, cols, 2)
					out := runOnce(t, b, n, 2*n*cols, func(o backend.Ops) {
						x, r, h := o.Tensor(n, cols), o.Tensor(n, cols), o.Tensor(n, cols)
						o.Embed(x, xt)
						o.Embed(r, rt)
						o.RMSNorm(h, x, w, eps)
						o.Add(h, r, h)
						o.Output(h)
						dst := map[string]backend.Tensor{"r": r, "x": x, "none": o.Tensor(n, cols)}[alias]
						o.RMSNormAdd(dst, x, w, r, eps)
						o.Output(dst)
					})
					want, got := out[:n*cols], out[n*cols:]
					for i := range want {
						if got[i] != want[i] {
							t.Fatalf("value %d: %v, want %v (RMSNorm then Add)", i, got[i], want[i])
						}
					}
				})
			}
		}
	}
	b := newBackend(t)
	if _, err := b.Record(1, func(o backend.Ops) {
		x := o.Tensor(1, 8)
		w, _ := randTable(t, b, rng, 1, 8, 1)
		o.RMSNormAdd(x, x, w, o.Tensor(2, 8), eps)
	}); err == nil || !strings.Contains(err.Error(), "rms_norm_add") {
		t.Errorf("a residual of the wrong shape: error %v", err)
	}
}

// TestGeGLU checks gelu(gate)·up against the tanh formula written out, over
// values that reach the saturated tails, with dst aliasing gate.
func TestGeGLU(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, cols := range []int{1, 7, 255, 1025} {
		b := newBackend(t)
		const n = 2
		gate, gv := randTable(t, b, rng, n, cols, 12)
		up, uv := randTable(t, b, rng, n, cols, 3)
		out := runOnce(t, b, n, n*cols, func(o backend.Ops) {
			g, u := o.Tensor(n, cols), o.Tensor(n, cols)
			o.Embed(g, gate)
			o.Embed(u, up)
			o.GeGLU(g, g, u)
			o.Output(g)
		})
		for i, x := range gv {
			xf := float64(x)
			want := 0.5 * xf * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(xf+0.044715*xf*xf*xf))) * float64(uv[i])
			if got := float64(out[i]); math.Abs(got-want) > 1e-5*max(1, math.Abs(want)) {
				t.Fatalf("cols %d, value %d (gate %v): %v, want %v", cols, i, x, got, want)
			}
		}
	}
}

// TestScale checks x *= s in place.
func TestScale(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	b := newBackend(t)
	const n, cols, s = 3, 13, float32(16.0)
	table, in := randTable(t, b, rng, n, cols, 1)
	out := runOnce(t, b, n, n*cols, func(o backend.Ops) {
		x := o.Tensor(n, cols)
		o.Embed(x, table)
		o.Scale(x, s)
		o.Output(x)
	})
	for i := range in {
		if out[i] != in[i]*s {
			t.Fatalf("value %d: %v, want %v", i, out[i], in[i]*s)
		}
	}
}

// TestSlidingWindowRing runs batches of several sizes through a two-layer
// cache, layer 0 global and layer 1 sliding (a ring of Window+Batch-1
// slots), and checks every row of both against attention written out over
// the whole history: windows of 1, 3 and more than the context, batches
// that straddle the ring's wrap, and several wraps.
func TestSlidingWindowRing(t *testing.T) {
	const (
		ctx, heads, kvHeads, hd = 40, 4, 2, 5
		kvDim, qDim             = kvHeads * hd, heads * hd
	)
	batches := []int{5, 1, 1, 4, 3, 1, 5, 2, 5, 1, 4, 5, 3} // 40 positions
	for _, window := range []int{1, 3, 7, 64} {
		t.Run(fmt.Sprintf("window%d", window), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(window), 7))
			b := New(2)
			c := backend.Cache{Layers: 2, Context: ctx, KVDim: kvDim, Windows: []int{0, window}, Batch: 5}
			if err := b.InitCache(c); err != nil {
				t.Fatal(err)
			}
			if want := min(ctx, window+4); c.Slots(1) != want || len(b.k[1]) != want*kvDim {
				t.Fatalf("layer 1 keeps %d slots (%d values), want %d", c.Slots(1), len(b.k[1]), want)
			}
			// Token id i stands for position i: its q, k and v are row i.
			qTab, qv := randTable(t, b, rng, ctx, qDim, 1)
			kTab, kv := randTable(t, b, rng, ctx, kvDim, 1)
			vTab, vv := randTable(t, b, rng, ctx, kvDim, 1)
			const scale = 0.7
			progs := map[int]backend.Program{}
			pos := 0
			for _, n := range batches {
				p := progs[n]
				if p == nil {
					var err error
					p, err = b.Record(n, func(o backend.Ops) {
						q, k, v := o.Tensor(n, qDim), o.Tensor(n, kvDim), o.Tensor(n, kvDim)
						o.Embed(q, qTab)
						o.Embed(k, kTab)
						o.Embed(v, vTab)
						for l, w := range []int{0, window} {
							o.StoreKV(l, k, v, nil)
							dst := o.Tensor(n, qDim)
							o.Attend(dst, q, l, backend.Attention{Heads: heads, KVHeads: kvHeads, HeadDim: hd, Scale: scale, Window: w})
							o.Output(dst)
						}
					})
					if err != nil {
						t.Fatal(err)
					}
					progs[n] = p
				}
				toks := make([]int32, n)
				for i := range toks {
					toks[i] = int32(pos + i)
				}
				out := make([]float32, 2*n*qDim)
				if err := p.Run(toks, pos, out); err != nil {
					t.Fatal(err)
				}
				for l, w := range []int{0, window} {
					for i := range n {
						p := pos + i
						first := 0
						if w > 0 {
							first = max(0, p-w+1)
						}
						for h := range heads {
							want := attendRef(qv[p*qDim+h*hd:][:hd], kv, vv, kvDim, (h/(heads/kvHeads))*hd, hd, first, p, scale)
							got := out[(l*n+i)*qDim+h*hd:][:hd]
							for j := range want {
								if math.Abs(float64(got[j])-want[j]) > 1e-5 {
									t.Fatalf("layer %d (window %d), position %d (batch of %d at %d), head %d, value %d: %v, want %v",
										l, w, p, n, pos, h, j, got[j], want[j])
								}
							}
						}
					}
				}
				pos += n
			}
			if pos != ctx {
				t.Fatalf("the batches cover %d positions, want the context %d", pos, ctx)
			}
		})
	}
}

// attendRef is softmax(scale·q·k_t) over positions first..last, applied to v_t,
// for the KV head whose values start at off in each position's row.
func attendRef(q, k, v []float32, kvDim, off, hd, first, last int, scale float64) []float64 {
	var mx = math.Inf(-1)
	s := make([]float64, last-first+1)
	for t := first; t <= last; t++ {
		var d float64
		for j := range hd {
			d += float64(q[j]) * float64(k[t*kvDim+off+j])
		}
		s[t-first] = d * scale
		mx = max(mx, s[t-first])
	}
	out := make([]float64, hd)
	var sum float64
	for t := first; t <= last; t++ {
		e := math.Exp(s[t-first] - mx)
		sum += e
		for j := range hd {
			out[j] += e * float64(v[t*kvDim+off+j])
		}
	}
	for j := range out {
		out[j] /= sum
	}
	return out
}

// TestRingErrors checks that a ring cannot be misused: global attention
// over it, a batch larger than it holds, a bad window list.
func TestRingErrors(t *testing.T) {
	b := New(1)
	c := backend.Cache{Layers: 1, Context: 32, KVDim: 4, Windows: []int{4}, Batch: 2} // ring of 5
	if err := b.InitCache(c); err != nil {
		t.Fatal(err)
	}
	attend := func(n, w int) error {
		_, err := b.Record(n, func(o backend.Ops) {
			k, q := o.Tensor(n, 4), o.Tensor(n, 4)
			o.StoreKV(0, k, k, nil)
			o.Attend(o.Tensor(n, 4), q, 0, backend.Attention{Heads: 1, KVHeads: 1, HeadDim: 4, Scale: 1, Window: w})
		})
		return err
	}
	if err := attend(2, 4); err != nil {
		t.Fatalf("a batch of 2 with window 4 in a ring of 5: %v", err)
	}
	for _, bad := range []struct {
		n, w int
		want string
	}{{2, 0, "global attention"}, {3, 4, "needs 6 cache slots"}, {6, 4, "ring of 5"}} {
		if err := attend(bad.n, bad.w); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Fatalf("batch %d, window %d: %v, want an error with %q", bad.n, bad.w, err, bad.want)
		}
	}
	for _, bad := range []backend.Cache{
		{Layers: 2, Context: 8, KVDim: 4, Windows: []int{1}},
		{Layers: 1, Context: 8, KVDim: 4, Windows: []int{-1}},
		{Layers: 1, Context: 8, KVDim: 4, Batch: -1},
	} {
		if err := b.InitCache(bad); err == nil {
			t.Fatalf("cache %+v accepted", bad)
		}
	}
}
