package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/vkinfer/vkinfer/quant"
	"github.com/vkinfer/vkinfer/vk"
)

// TestHeadRope checks the fused head norms, rotation and cache stores
// against the float64 references of each step (rmsNormRef per head, then
// ropeRef): Qwen3's and Gemma 3's shapes, a partial rotation with
// frequency factors, the normal layout, a ring far past its first lap, a
// batch longer than the ring (its last rows kept), and rows of distinct
// sequences. Every cache slot no row owns keeps its sentinel.
func TestHeadRope(t *testing.T) {
	k := setup(t)
	type tcase struct {
		n, heads, kvHeads, ctx, seqs, pos, seq int
		r                                      RoPE
		factors, rows                          bool
	}
	cases := []tcase{
		{1, 4, 2, 2048, 1, 1003, 0, RoPE{HeadDim: 128, Dims: 128, Base: 1e6, Scale: 1, NeoX: true}, false, false},
		{11, 2, 1, 8, 2, 5, 1, RoPE{HeadDim: 256, Dims: 256, Base: 10000, Scale: 0.125, NeoX: true}, false, false},
		{7, 5, 5, 20, 1, 15, 0, RoPE{HeadDim: 80, Dims: 48, Base: 500000, Scale: 1, NeoX: true}, true, false},
		{3, 3, 1, 9, 1, 25, 0, RoPE{HeadDim: 64, Dims: 64, Base: 10000, Scale: 1}, true, false},
		{257, 2, 1, 300, 1, 40, 0, RoPE{HeadDim: 6, Dims: 4, Base: 10000, Scale: 1}, false, false},
		{len(rowCase.seqs), 4, 2, 8, 4, 0, 0, RoPE{HeadDim: 128, Dims: 128, Base: 1e6, Scale: 1, NeoX: true}, false, true},
	}
	for _, c := range cases {
		name := fmt.Sprintf("n%d/h%d-%d/d%d-of-%d/ctx%d/neox=%v/ff=%v/rows=%v", c.n, c.heads, c.kvHeads, c.r.Dims, c.r.HeadDim, c.ctx, c.r.NeoX, c.factors, c.rows)
		t.Run(name, func(t *testing.T) {
			D := c.r.HeadDim
			rng := rand.New(rand.NewPCG(uint64(c.n*c.heads), uint64(D)))
			qDim, kvDim := c.heads*D, c.kvHeads*D
			q, kx, v := normals(rng, c.n*qDim, 3), normals(rng, c.n*kvDim, 3), normals(rng, c.n*kvDim, 3)
			for i := 0; i < len(q); i += 3 * D {
				for j := i; j < min(i+D, len(q)); j++ {
					q[j] *= 100 // heads of very different sizes
				}
			}
			qw, kw := normals(rng, D, 1), normals(rng, D, 1)
			ff := make([]float32, c.r.Dims/2)
			for i := range ff {
				ff[i] = 1
				if c.factors {
					ff[i] = float32(1 + 7*rng.Float64())
				}
			}
			pos, seq := make([]int, c.n), make([]int, c.n)
			for i := range c.n {
				pos[i], seq[i] = c.pos+i, c.seq
				if c.rows {
					pos[i], seq[i] = int(rowCase.pos[i]), int(rowCase.seqs[i])
				}
			}

			// The references: each head normalised, then rotated at its
			// row's position.
			tol := 2e-5 + 4*math.Sqrt(float64(D))*eps32
			ref := func(x, w []float32, heads int) (want, scale []float64, maxTheta float64) {
				dim := heads * D
				normed := rmsNormRef(x, w, c.n*heads, D, 1e-6)
				want, scale = make([]float64, len(x)), make([]float64, len(x))
				for i := range c.n {
					row := make([]float32, dim)
					for j := range row {
						row[j] = float32(normed[i*dim+j])
					}
					wr, sr, th := ropeRef(row, 1, heads, pos[i], c.r, ff)
					copy(want[i*dim:], wr)
					copy(scale[i*dim:], sr)
					maxTheta = max(maxTheta, th)
				}
				return want, scale, maxTheta
			}
			wantQ, scaleQ, thQ := ref(q, qw, c.heads)
			wantK, scaleK, thK := ref(kx, kw, c.kvHeads)

			const sentinel = 0xA5
			cacheBytes := 2 * c.seqs * c.ctx * kvDim
			init := make([]byte, cacheBytes)
			for i := range init {
				init[i] = sentinel
			}
			qb, kb, vb := floatBuffer(t, q), floatBuffer(t, kx), floatBuffer(t, v)
			kc, vc := buffer(t, int64(cacheBytes), init), buffer(t, int64(cacheBytes), init)
			var step *vk.Buffer
			if c.rows {
				step = buffer(t, 8*int64(c.n), AppendRowTable(nil, rowCase.seqs, rowCase.pos))
			} else {
				step = buffer(t, 8, u32Bytes(uint32(c.pos), uint32(c.seq)))
			}
			rp := c.r
			if c.factors {
				fb := whole(floatBuffer(t, ff))
				rp.Factors = &fb
			}
			h := HeadRope{Q: whole(qb), K: whole(kb), V: whole(vb), QNorm: whole(floatBuffer(t, qw)), KNorm: whole(floatBuffer(t, kw)),
				KCache: whole(kc), VCache: whole(vc), Step: whole(step), N: c.n, Heads: c.heads, KVHeads: c.kvHeads,
				Rope: rp, Eps: 1e-6, Slots: c.ctx, Seqs: c.seqs, Rows: c.rows}
			run(t, func(s *vk.Sequence) error { return k.HeadRope(s, h) })

			compare(t, "q", read(t, qb, 0, len(q)), wantQ, scaleQ, tol+2e-6*thQ)
			// The cache: each slot holds the last row stored there.
			owner := map[int]int{}
			for i := range c.n {
				owner[seq[i]*c.ctx+pos[i]%c.ctx] = i
			}
			for _, cc := range []struct {
				name string
				b    *vk.Buffer
				want func(i, j int) (float64, float64)
			}{
				{"k", kc, func(i, j int) (float64, float64) {
					return wantK[i*kvDim+j], (tol + 2e-6*thK) * scaleK[i*kvDim+j]
				}},
				{"v", vc, func(i, j int) (float64, float64) { return float64(v[i*kvDim+j]), 0 }},
			} {
				got := make([]byte, cacheBytes)
				if err := cc.b.Read(0, got); err != nil {
					t.Fatal(err)
				}
				vals := make([]float32, cacheBytes/2)
				if err := quant.Dequantize(quant.F16, got, vals); err != nil {
					t.Fatal(err)
				}
				bad := 0
				for row := range c.seqs * c.ctx {
					i, ok := owner[row]
					for j := range kvDim {
						o := row*kvDim + j
						fine := got[2*o] == sentinel && got[2*o+1] == sentinel
						if ok {
							w, e := cc.want(i, j)
							// f16 rounding (half an ulp, 2^-11 relative, or the
							// subnormal step) plus the rotation's error.
							fine = math.Abs(float64(vals[o])-w) <= math.Abs(w)/1024+6.2e-5+e
						}
						if !fine {
							if bad++; bad <= 5 {
								t.Errorf("%s cache row %d value %d = %v (row %d stored: %v)", cc.name, row, j, vals[o], i, ok)
							}
						}
					}
				}
			}
		})
	}
}

// TestHeadRopeRejects checks HeadRope's argument checks.
func TestHeadRopeRejects(t *testing.T) {
	k := setup(t)
	d := whole(kern.dummy)
	ok := HeadRope{Q: d, K: d, V: d, QNorm: d, KNorm: d, KCache: d, VCache: d, Step: d, N: 1, Heads: 1, KVHeads: 1,
		Rope: RoPE{HeadDim: 2, Dims: 2, Base: 10000, Scale: 1}, Eps: 1e-6, Slots: 1}
	bad := func(f func(h *HeadRope)) error {
		h := ok
		f(&h)
		return k.HeadRope(nil, h)
	}
	expectRejected(t, []rejected{
		{"no kv heads", bad(func(h *HeadRope) { h.KVHeads = 0 })},
		{"no slots", bad(func(h *HeadRope) { h.Slots = 0 })},
		{"odd rotation", bad(func(h *HeadRope) { h.Rope.Dims = 3 })},
		{"head too large", bad(func(h *HeadRope) { h.Rope = RoPE{HeadDim: 2048, Dims: 2, Base: 1, Scale: 1} })},
		{"rows past the grid", bad(func(h *HeadRope) { h.N = 1 << 30 })},
		{"cache too small", bad(func(h *HeadRope) { h.Slots = 1 << 20 })},
	})
}
