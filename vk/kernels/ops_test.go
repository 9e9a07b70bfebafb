package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/vkinfer/vkinfer/attention"
	"github.com/vkinfer/vkinfer/quant"
	"github.com/vkinfer/vkinfer/vk"
)

// shapes of the row-wise tests: every awkward size as rows and as columns.
var rowsCols = [][2]int{{1, 1}, {7, 1025}, {255, 7}, {257, 255}, {1025, 257}, {3, 4096}}

func TestEmbed(t *testing.T) {
	k := setup(t)
	for _, qt := range WeightTypes {
		// A vocabulary of 257 rows; the float table's rows end inside a
		// 16-value piece.
		const vocab = 257
		cols := 2 * qt.BlockSize()
		switch {
		case isFloat(qt):
			cols = 20
		case qt.BlockSize() == 32:
			cols = 96 // three 34- or 18-byte blocks: rows on 2-byte boundaries
		}
		t.Run(qt.String(), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(qt), 1))
			raw, deq := quantized(t, r, qt, vocab, cols)
			// Repeated ids, the last row, and two ids outside the table
			// (which must give zero rows).
			tokens := []int32{5, vocab - 1, 0, 5, 128, vocab, -1, 77, 200}
			tok := make([]uint32, len(tokens))
			for i, v := range tokens {
				tok[i] = uint32(v)
			}
			n := len(tokens)
			tb := buffer(t, int64(len(raw)), raw)
			ib := buffer(t, 4*int64(n), u32Bytes(tok...))
			db := buffer(t, f32(n*cols), nil)
			run(t, func(s *vk.Sequence) error {
				return k.Embed(s, whole(db), whole(tb), whole(ib), qt, n, vocab, cols)
			})
			want, scale := make([]float64, n*cols), make([]float64, n*cols)
			for i, id := range tokens {
				for c := 0; c < cols; c++ {
					if id >= 0 && id < vocab {
						want[i*cols+c] = float64(deq[int(id)*cols+c])
					}
					scale[i*cols+c] = 1 // values are O(1): an absolute bound
				}
			}
			// The GPU and the CPU compute d*sc*q - dmin*m in f32, perhaps
			// in another order or fused: a few roundoffs of the terms.
			compare(t, "rows", read(t, db, 0, n*cols), want, scale, 1e-5)
		})
	}
}

// TestRMSNorm checks the plain kernel on awkward shapes and the q8 form
// (which writes the 8-bit copy too) on rows that are whole blocks of 32.
func TestRMSNorm(t *testing.T) {
	k := setup(t)
	cases := append([][2]int{}, rowsCols...)
	q8From := len(cases)
	// 1025 blocks of 32 take the general path (more blocks than lanes).
	cases = append(cases, [2]int{1, 4096}, [2]int{3, 96}, [2]int{8, 32}, [2]int{2, 14336}, [2]int{1, 32800}, [2]int{16, 384}, [2]int{3, 384})
	for i, rc := range cases {
		rows, cols := rc[0], rc[1]
		inPlace := i%2 == 1
		q8 := i >= q8From
		t.Run(fmt.Sprintf("%dx%d/inplace=%v/q8=%v", rows, cols, inPlace, q8), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(rows), uint64(cols)))
			x := normals(r, rows*cols, 3)
			w := normals(r, cols, 1)
			const eps = 1e-5
			xb, wb := floatBuffer(t, x), floatBuffer(t, w)
			db := xb
			if !inPlace {
				db = buffer(t, f32(rows*cols), nil)
			}
			qb := buffer(t, Q8Bytes(rows, cols), nil)
			run(t, func(s *vk.Sequence) error {
				if q8 {
					return k.RMSNormQ8(s, whole(db), whole(qb), whole(xb), whole(wb), rows, cols, eps)
				}
				return k.RMSNorm(s, whole(db), whole(xb), whole(wb), rows, cols, eps)
			})
			got := read(t, db, 0, rows*cols)
			if q8 {
				q8Values(t, readBytes(t, qb), got, rows, cols)
			}
			want := rmsNormRef(x, w, rows, cols, eps)
			scale := make([]float64, rows*cols)
			for i, v := range want {
				scale[i] = math.Abs(v)
			}
			// Relative to each value: the f32 sum of squares (cols terms,
			// all positive) and inversesqrt (a few ulp on GPUs).
			compare(t, "dst", got, want, scale, 1e-5+4*math.Sqrt(float64(cols))*eps32)
		})
	}
}

// TestRMSNormAdd checks the norm with the residual added (Gemma 3's
// post-norms) on awkward shapes, with dst the residual (as the engine
// records it), dst the normalised input, and dst a buffer of its own: each
// value must be read before the same invocation overwrites it.
func TestRMSNormAdd(t *testing.T) {
	k := setup(t)
	i := 0
	for _, cols := range []int{7, 255, 2560} {
		for _, rows := range []int{1, 3, 17} {
			dstIs := []string{"res", "x", "own"}[i%3]
			i++
			t.Run(fmt.Sprintf("%dx%d/dst=%s", rows, cols, dstIs), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(rows), uint64(cols)+1))
				x := normals(r, rows*cols, 3)
				w := normals(r, cols, 1)
				res := normals(r, rows*cols, 20)
				const eps = 1e-6
				xb, wb, rb := floatBuffer(t, x), floatBuffer(t, w), floatBuffer(t, res)
				db := map[string]*vk.Buffer{"res": rb, "x": xb, "own": nil}[dstIs]
				if db == nil {
					db = buffer(t, f32(rows*cols), nil)
				}
				run(t, func(s *vk.Sequence) error {
					return k.RMSNormAdd(s, whole(db), whole(xb), whole(wb), whole(rb), rows, cols, eps)
				})
				want, scale := rmsNormRef(x, w, rows, cols, eps), make([]float64, rows*cols)
				for i, norm := range want {
					want[i] = float64(res[i]) + norm
					// The norm's error (as TestRMSNorm) and the f32 add's
					// rounding are relative to the two terms.
					scale[i] = math.Abs(norm) + math.Abs(float64(res[i]))
				}
				compare(t, "dst", read(t, db, 0, rows*cols), want, scale, 1e-5+4*math.Sqrt(float64(cols))*eps32)
			})
		}
	}
	big, small := whole(buffer(t, f32(8), nil)), whole(buffer(t, f32(4), nil))
	if err := k.RMSNormAdd(nil, big, big, small, small, 2, 4, 1e-6); err == nil {
		t.Error("a residual of 4 values for 2 rows of 4 was accepted")
	}
}

// TestHeadNorm normalises every head of rows of heads*headDim values in
// place with one weight of headDim values (Qwen3's and Gemma 3's Q and K
// norms): the head dims of real models and awkward row and head counts.
func TestHeadNorm(t *testing.T) {
	k := setup(t)
	for _, c := range []struct{ rows, heads, headDim int }{
		{1, 1, 64}, {7, 3, 128}, {257, 4, 256}, {1, 16, 128}, {5, 8, 256}, {3, 5, 80}, {17, 2, 7},
	} {
		t.Run(fmt.Sprintf("%dx%dx%d", c.rows, c.heads, c.headDim), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(c.rows*c.heads), uint64(c.headDim)))
			n := c.rows * c.heads * c.headDim
			x := normals(r, n, 3)
			for h := 0; h < c.rows*c.heads; h += 3 {
				// Heads of very different sizes: each must be normalised
				// by its own sum of squares.
				for i := h * c.headDim; i < (h+1)*c.headDim; i++ {
					x[i] *= float32(1 + 100*(h%2))
				}
			}
			w := normals(r, c.headDim, 1)
			const eps = 1e-6
			xb, wb := floatBuffer(t, x), floatBuffer(t, w)
			run(t, func(s *vk.Sequence) error {
				return k.HeadNorm(s, whole(xb), whole(wb), c.rows, c.heads, c.headDim, eps)
			})
			// Each head is a row of RMSNorm.
			want, scale := rmsNormRef(x, w, c.rows*c.heads, c.headDim, eps), make([]float64, n)
			for i, v := range want {
				scale[i] = math.Abs(v)
			}
			compare(t, "x", read(t, xb, 0, n), want, scale, 1e-5+4*math.Sqrt(float64(c.headDim))*eps32) // as TestRMSNorm
		})
	}
	if err := k.HeadNorm(nil, whole(kern.dummy), whole(kern.dummy), 1, 0, 64, 1e-6); err == nil {
		t.Error("zero heads were accepted")
	}
}

func TestRope(t *testing.T) {
	k := setup(t)
	cases := []struct {
		n, heads, pos int
		r             RoPE
		factors       bool
		inPlace       bool
	}{
		{1, 1, 0, RoPE{HeadDim: 2, Dims: 2, Base: 10000, Scale: 1}, false, false},
		{7, 5, 3, RoPE{HeadDim: 64, Dims: 64, Base: 10000, Scale: 1, NeoX: true}, false, true},
		{3, 4, 1000, RoPE{HeadDim: 128, Dims: 32, Base: 500000, Scale: 0.25}, true, false},
		{257, 3, 17, RoPE{HeadDim: 80, Dims: 48, Base: 1e6, Scale: 1, NeoX: true}, true, true},
		{9, 2, 40, RoPE{HeadDim: 6, Dims: 4, Base: 10000, Scale: 1}, false, true},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("n%d/h%d/pos%d/%d-of-%d/neox=%v/ff=%v", c.n, c.heads, c.pos, c.r.Dims, c.r.HeadDim, c.r.NeoX, c.factors), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(c.n), uint64(c.r.HeadDim)))
			size := c.n * c.heads * c.r.HeadDim
			x := normals(r, size, 1)
			ff := make([]float32, c.r.Dims/2)
			for i := range ff {
				ff[i] = 1
				if c.factors {
					ff[i] = float32(1 + 7*r.Float64())
				}
			}
			xb := floatBuffer(t, x)
			db := xb
			if !c.inPlace {
				db = buffer(t, f32(size), nil)
			}
			// The step buffer holds pos at offset 0; put it 16 bytes into a
			// larger buffer to check the binding offset is honoured.
			step := buffer(t, 32, u32Bytes(0xdead, 0xdead, 0xdead, 0xdead, uint32(c.pos)))
			rp := c.r
			if c.factors {
				fb := whole(floatBuffer(t, ff))
				rp.Factors = &fb
			}
			run(t, func(s *vk.Sequence) error {
				return k.Rope(s, whole(db), whole(xb), vk.Binding{Buf: step, Off: 16, Size: 4}, c.n, c.heads, rp)
			})
			want, scale, maxTheta := ropeRef(x, c.n, c.heads, c.pos, c.r, ff)
			// The angle is computed in f32 (position times an exp2
			// frequency good to a few ulp) so it errs by about
			// theta * 1e-6; sin/cos add their own absolute error.
			tol := 1e-5 + 2e-6*maxTheta
			compare(t, "dst", read(t, db, 0, size), want, scale, tol)
		})
	}
}

// ropeRef rotates x [n][heads][r.HeadDim] at positions pos.. in float64,
// with per-pair factors ff, and returns per value the magnitude its error
// scales with (the pair it mixes) and the largest angle.
func ropeRef(x []float32, n, heads, pos int, r RoPE, ff []float32) (want, scale []float64, maxTheta float64) {
	want, scale = make([]float64, len(x)), make([]float64, len(x))
	half := r.Dims / 2
	for i := 0; i < n; i++ {
		for h := 0; h < heads; h++ {
			base := (i*heads + h) * r.HeadDim
			for d := 0; d < r.HeadDim; d++ {
				want[base+d] = float64(x[base+d])
				scale[base+d] = math.Abs(float64(x[base+d]))
			}
			for p := 0; p < half; p++ {
				a, b := 2*p, 2*p+1
				if r.NeoX {
					a, b = p, p+half
				}
				theta := float64(pos+i) * float64(r.Scale) *
					math.Pow(float64(r.Base), -2*float64(p)/float64(r.Dims)) / float64(ff[p])
				maxTheta = max(maxTheta, theta)
				sin, cos := math.Sincos(theta)
				x0, x1 := float64(x[base+a]), float64(x[base+b])
				want[base+a] = x0*cos - x1*sin
				want[base+b] = x0*sin + x1*cos
				// A rotated value errs with the angle times the size of
				// the pair it mixes.
				m := math.Abs(x0) + math.Abs(x1)
				scale[base+a], scale[base+b] = m, m
			}
		}
	}
	return want, scale, maxTheta
}

// gluRef is act(x) of g in float64, with the argument y of the
// exponential in the shader's x / (1 + e^-y) form (glu.glsl): a relative
// error e in y moves the result by about |y|*e, so tolerances grow with it.
// gelu is ggml_gelu's tanh form, 0.5*x*(1 + tanh(u)), computed as
// x / (1 + e^-2u) here too: 1 + tanh(u) cancels in float64 as well (at
// u = -17 only two digits are left, and past u = -19 none).
func gluRef(g GLU, x float64) (act, y float64) {
	y = x
	if g == GeGLU {
		y = 2 * math.Sqrt(2/math.Pi) * (x + 0.044715*x*x*x)
	}
	return x / (1 + math.Exp(-y)), y
}

func TestEltwise(t *testing.T) {
	k := setup(t)
	r := rand.New(rand.NewPCG(3, 4))
	rel := func(want []float64) []float64 {
		s := make([]float64, len(want))
		for i, w := range want {
			s[i] = math.Max(math.Abs(w), 1e-30)
		}
		return s
	}
	for _, rc := range rowsCols {
		rows, cols := rc[0], rc[1]
		n := rows * cols
		a, b := normals(r, n, 2), normals(r, n, 2)
		if n > 4 {
			// The activations' far tails: exp overflow and saturation,
			// and (gelu) a cube past f32's range.
			a[0], a[1], a[2], a[3] = -100, 100, -1e15, 1e15
		}
		bias := normals(r, cols, 1)
		t.Run(fmt.Sprintf("add/%d", n), func(t *testing.T) {
			ab, bb := floatBuffer(t, a), floatBuffer(t, b)
			run(t, func(s *vk.Sequence) error { return k.Add(s, whole(ab), whole(ab), whole(bb), n) }) // in place
			want := make([]float64, n)
			for i := range want {
				want[i] = float64(a[i] + b[i]) // one f32 rounding, as on the GPU
			}
			compare(t, "a+b", read(t, ab, 0, n), want, rel(want), 0)
		})
		for _, g := range []GLU{SwiGLU, GeGLU} {
			t.Run(fmt.Sprintf("%s/%d", g, n), func(t *testing.T) {
				ab, bb := floatBuffer(t, a), floatBuffer(t, b)
				db := ab // in place over gate, as the engine runs it
				if g == SwiGLU {
					db = buffer(t, f32(n), nil)
				}
				run(t, func(s *vk.Sequence) error { return k.Gated(s, g, whole(db), whole(ab), whole(bb), n) })
				want, scale := make([]float64, n), make([]float64, n)
				for i := range want {
					act, y := gluRef(g, float64(a[i]))
					want[i] = act * float64(b[i])
					// Floored where e^-y overflows f32 and the result
					// flushes to 0 instead of ~1e-40.
					scale[i] = max(math.Abs(want[i])*max(1, math.Abs(y)/10), 1e-30)
				}
				// exp (of an argument that is itself a few roundings off)
				// and the division: a few ulp each on GPUs.
				compare(t, "act(a)*b", read(t, db, 0, n), want, scale, 1e-5)
			})
		}
		t.Run(fmt.Sprintf("scale/%d", n), func(t *testing.T) {
			ab := floatBuffer(t, a)
			f := float32(math.Sqrt(float64(cols)))
			run(t, func(s *vk.Sequence) error { return k.Scale(s, whole(ab), whole(ab), n, f) }) // in place
			want := make([]float64, n)
			for i := range want {
				want[i] = float64(a[i] * f) // one f32 rounding, as on the GPU
			}
			compare(t, "a*f", read(t, ab, 0, n), want, rel(want), 0)
		})
		t.Run(fmt.Sprintf("bias/%dx%d", rows, cols), func(t *testing.T) {
			ab, bb, db := floatBuffer(t, a), floatBuffer(t, bias), buffer(t, f32(n), nil)
			run(t, func(s *vk.Sequence) error { return k.AddBias(s, whole(db), whole(ab), whole(bb), rows, cols) })
			want := make([]float64, n)
			for i := range want {
				want[i] = float64(a[i] + bias[i%cols])
			}
			compare(t, "x+bias", read(t, db, 0, n), want, rel(want), 0)
		})
	}
	if err := k.Gated(nil, GLU(7), whole(kern.dummy), whole(kern.dummy), whole(kern.dummy), 1); err == nil {
		t.Error("an unknown gated activation was accepted")
	}
	t.Run("copy_rows", func(t *testing.T) {
		// Cut columns 64..64+cols of rows of 1025 into rows 300 apart,
		// leaving the gaps untouched. The column offset is a binding offset
		// of 256 bytes, the largest storage alignment Vulkan allows.
		const rows, cols, srcStride, dstStride, from = 7, 257, 1025, 300, 64
		src := normals(r, rows*srcStride, 1)
		dst := normals(r, rows*dstStride, 1)
		sb, db := floatBuffer(t, src), floatBuffer(t, dst)
		run(t, func(s *vk.Sequence) error {
			return k.CopyRows(s, whole(db), vk.Binding{Buf: sb, Off: 4 * from}, rows, cols, dstStride, srcStride)
		})
		want := make([]float64, len(dst))
		for i, v := range dst {
			want[i] = float64(v)
			if row, c := i/dstStride, i%dstStride; c < cols {
				want[i] = float64(src[row*srcStride+from+c])
			}
		}
		compare(t, "copy", read(t, db, 0, len(dst)), want, rel(want), 0)
	})
}

// TestStoreKV stores rows into the f16 cache as they are, and rotated as
// keys (the fused RoPE: normal and NeoX pairs, partial rotation, frequency
// factors) against ropeRef. The cache is a ring: position p goes to row p
// mod ctx (batches that wrap, start past the ring, or outrun it), in the
// region of its sequence (the cache holds two; odd batches go to the
// second, and the other region must keep what it held).
func TestStoreKV(t *testing.T) {
	k := setup(t)
	for _, c := range []struct {
		n, kvDim, ctx, pos int
		rope               *RoPE
		factors            bool
	}{
		{1, 2, 1, 0, nil, false},
		{7, 1026, 20, 5, nil, false},
		{7, 6, 20, 15, nil, false},   // positions 20 and 21 wrap to rows 0 and 1
		{5, 10, 8, 1003, nil, false}, // a ring far past its first lap: rows 3..7
		{11, 4, 4, 2, nil, false},    // a batch longer than the ring keeps its last 4 rows
		{3, 64, 9, 25, &RoPE{HeadDim: 32, Dims: 32, Base: 10000, Scale: 1}, false}, // rotated at positions 25..27, rows 7, 8, 0
		{257, 256, 300, 40, nil, false},
		{1, 1024, 2000, 1999, &RoPE{HeadDim: 128, Dims: 128, Base: 500000, Scale: 1}, true},
		{7, 384, 40, 30, &RoPE{HeadDim: 64, Dims: 64, Base: 10000, Scale: 1, NeoX: true}, false},
		{5, 160, 10, 3, &RoPE{HeadDim: 80, Dims: 48, Base: 1e6, Scale: 0.5, NeoX: true}, true},
		{3, 12, 8, 2, &RoPE{HeadDim: 6, Dims: 4, Base: 10000, Scale: 1}, false},
	} {
		t.Run(fmt.Sprintf("n%d/dim%d/ctx%d/pos%d/rope=%v", c.n, c.kvDim, c.ctx, c.pos, c.rope != nil), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(c.n), uint64(c.kvDim)))
			src := normals(r, c.n*c.kvDim, 10)
			stored := src         // the values the cache should hold
			var ropeErr []float64 // with RoPE: each value's rotation error bound
			var rp *RoPE
			if c.rope != nil {
				ff := make([]float32, c.rope.Dims/2)
				for i := range ff {
					ff[i] = 1
					if c.factors {
						ff[i] = float32(1 + 7*r.Float64())
					}
				}
				want, scale, maxTheta := ropeRef(src, c.n, c.kvDim/c.rope.HeadDim, c.pos, *c.rope, ff)
				stored, ropeErr = make([]float32, len(want)), make([]float64, len(want))
				for i, w := range want {
					stored[i] = float32(w)
					ropeErr[i] = (1e-5 + 2e-6*maxTheta) * scale[i] // as TestRope allows
				}
				rc := *c.rope
				if c.factors {
					fb := whole(floatBuffer(t, ff))
					rc.Factors = &fb
				}
				rp = &rc
			}
			const sentinel = 0xA5
			region := 2 * c.ctx * c.kvDim // bytes
			init := make([]byte, 2*region)
			for i := range init {
				init[i] = sentinel
			}
			cb := buffer(t, int64(len(init)), init)
			sb := floatBuffer(t, src)
			seq := c.n % 2
			step := buffer(t, 8, u32Bytes(uint32(c.pos), uint32(seq)))
			run(t, func(s *vk.Sequence) error {
				return k.StoreKV(s, whole(cb), whole(sb), whole(step), c.n, c.kvDim, c.ctx, rp)
			})
			both := make([]byte, len(init))
			if err := cb.Read(0, both); err != nil {
				t.Fatal(err)
			}
			got, other := both[seq*region:(seq+1)*region], both[(1-seq)*region:(2-seq)*region]
			for i, b := range other {
				if b != sentinel {
					t.Fatalf("sequence %d's store wrote byte %d of sequence %d's region", seq, i, 1-seq)
				}
			}
			bits, _ := f16s(stored)
			bad := 0
			for row := 0; row < c.ctx; row++ {
				for j := 0; j < c.kvDim; j++ {
					o := 2 * (row*c.kvDim + j)
					h := int(got[o]) | int(got[o+1])<<8
					want, slack := sentinel<<8|sentinel, 0
					// The batch row stored here: the last whose position
					// is row mod ctx.
					i := c.n - 1 - ((c.pos+c.n-1-row)%c.ctx+c.ctx)%c.ctx
					if i >= 0 && i < c.n {
						w := 2 * (i*c.kvDim + j)
						want = int(bits[w]) | int(bits[w+1])<<8
						// The CPU rounds to nearest even; allow one f16 ulp
						// (same sign, adjacent encoding) for drivers whose
						// conversion rounds otherwise.
						if h>>15 == want>>15 {
							slack = 1
							// A rotated value may also be off by the
							// rotation's error, in ulps of its f16.
							if ropeErr != nil {
								v := math.Abs(float64(stored[w/2]))
								ulp := math.Ldexp(1, max(math.Ilogb(v), -14)-10)
								slack += int(math.Ceil(ropeErr[w/2] / ulp))
							}
						}
					}
					if h < want-slack || h > want+slack {
						if bad++; bad <= 5 {
							t.Errorf("cache[%d][%d] = %#04x, want %#04x", row, j, h, want)
						}
					}
				}
			}
		})
	}
}

// f16s converts to f16 and back, as the KV cache stores values.
func f16s(v []float32) ([]byte, []float32) {
	raw, err := quant.Quantize(quant.F16, v)
	if err != nil {
		panic(err)
	}
	back := make([]float32, len(v))
	if err := quant.Dequantize(quant.F16, raw, back); err != nil {
		panic(err)
	}
	return raw, back
}

func TestAttention(t *testing.T) {
	k := setup(t)
	for _, c := range []struct {
		n, pos int
		a      Attn
	}{
		{1, 0, Attn{Heads: 1, KVHeads: 1, HeadDim: 2, Ctx: 1}},
		{1, 100, Attn{Heads: 4, KVHeads: 2, HeadDim: 64, Ctx: 128}},
		{5, 60, Attn{Heads: 8, KVHeads: 1, HeadDim: 256, Ctx: 65}},
		{70, 0, Attn{Heads: 3, KVHeads: 3, HeadDim: 6, Ctx: 70}}, // keys span two chunks
		{9, 200, Attn{Heads: 6, KVHeads: 2, HeadDim: 130, Ctx: 300}},
		// Sliding windows over rings of Window+n-1 rows (the batch
		// straddling the wrap), a window of 1, one longer than the depth,
		// and a ring without a window.
		{6, 45, Attn{Heads: 4, KVHeads: 2, HeadDim: 64, Ctx: 20, Window: 15}},
		{3, 1000, Attn{Heads: 2, KVHeads: 1, HeadDim: 256, Ctx: 70, Window: 1}},
		{1, 333, Attn{Heads: 8, KVHeads: 2, HeadDim: 128, Ctx: 90, Window: 90}},
		{70, 10, Attn{Heads: 3, KVHeads: 3, HeadDim: 6, Ctx: 200, Window: 100}}, // keys span two chunks
		{4, 30, Attn{Heads: 2, KVHeads: 2, HeadDim: 16, Ctx: 50, Window: 1000}},
		{5, 97, Attn{Heads: 2, KVHeads: 1, HeadDim: 32, Ctx: 64}},
	} {
		c.a.Scale = float32(1 / math.Sqrt(float64(c.a.HeadDim)))
		t.Run(fmt.Sprintf("n%d/pos%d/h%d/kv%d/d%d/ctx%d/w%d", c.n, c.pos, c.a.Heads, c.a.KVHeads, c.a.HeadDim, c.a.Ctx, c.a.Window), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(c.n), uint64(c.a.HeadDim)))
			D, kvDim := c.a.HeadDim, c.a.KVHeads*c.a.HeadDim
			qDim := c.a.Heads * D
			q := normals(r, c.n*qDim, 1)
			// Keys with a spread of 2 make the softmax peaky enough that the
			// max subtraction matters.
			kraw, kv := f16s(normals(r, c.a.Ctx*kvDim, 2))
			vraw, vv := f16s(normals(r, c.a.Ctx*kvDim, 1))
			qb, db := floatBuffer(t, q), buffer(t, f32(c.n*qDim), nil)
			kb, vb := buffer(t, int64(len(kraw)), kraw), buffer(t, int64(len(vraw)), vraw)
			step := buffer(t, 8, u32Bytes(uint32(c.pos), 0))
			run(t, func(s *vk.Sequence) error {
				return k.Attention(s, whole(db), whole(qb), whole(kb), whole(vb), whole(step), c.n, c.a)
			})
			want, scale := make([]float64, c.n*qDim), make([]float64, c.n*qDim)
			group := c.a.Heads / c.a.KVHeads
			// The keys each row sees: attention.Problem's rule; key tk of
			// row i at position first+tk, in ring row (first+tk) mod Ctx.
			ring := attention.Problem{Queries: c.n, Pos: c.pos, Window: c.a.Window, Slots: c.a.Ctx}
			for i := 0; i < c.n; i++ {
				first := ring.First(c.pos + i)
				row := func(tk int) int { return (first + tk) % c.a.Ctx }
				for h := 0; h < c.a.Heads; h++ {
					qo, ko := (i*c.a.Heads+h)*D, (h/group)*D
					s := make([]float64, c.pos+i+1-first)
					m := math.Inf(-1)
					for tk := range s {
						for d := 0; d < D; d++ {
							s[tk] += float64(q[qo+d]) * float64(kv[row(tk)*kvDim+ko+d])
						}
						s[tk] *= float64(c.a.Scale)
						m = max(m, s[tk])
					}
					var l float64
					for tk := range s {
						s[tk] = math.Exp(s[tk] - m)
						l += s[tk]
					}
					for d := 0; d < D; d++ {
						var o, mag float64
						for tk := range s {
							v := float64(vv[row(tk)*kvDim+ko+d])
							o += s[tk] * v
							mag += s[tk] * math.Abs(v)
						}
						want[qo+d], scale[qo+d] = o/l, mag/l
					}
				}
			}
			// Relative to sum p|v|: scores err by ~1e-6 (f32 dot products of
			// O(1) terms), exp by a few ulp, the weighted sums by sqrt(L) ulp.
			compare(t, "out", read(t, db, 0, c.n*qDim), want, scale, 2e-5)
		})
	}
}

// rmsNormRef is RMSNorm in float64: x (rows of cols values) over the root
// mean square of its row, times w.
func rmsNormRef(x, w []float32, rows, cols int, eps float64) []float64 {
	want := make([]float64, rows*cols)
	for r := 0; r < rows; r++ {
		var ss float64
		for _, v := range x[r*cols : (r+1)*cols] {
			ss += float64(v) * float64(v)
		}
		inv := 1 / math.Sqrt(ss/float64(cols)+eps)
		for c := 0; c < cols; c++ {
			want[r*cols+c] = float64(x[r*cols+c]) * inv * float64(w[c])
		}
	}
	return want
}

// rowCase is a batch of one token each of distinct sequences: seqs[i] at
// pos[i], as the server's batched decode gives them.
var rowCase = struct{ seqs, pos []int32 }{
	// Sequence 2 is past its ring's first lap (ctx 8 below: slot 1),
	// sequence 1 far past it (slot 0); sequence 3 has no row and its
	// region must stay as it was.
	seqs: []int32{2, 0, 1},
	pos:  []int32{17, 3, 40},
}

// TestRopeRows rotates each row at its own position (the row table),
// against ropeRef row by row.
func TestRopeRows(t *testing.T) {
	k := setup(t)
	for _, rc := range []RoPE{
		{HeadDim: 64, Dims: 64, Base: 10000, Scale: 1, NeoX: true},
		{HeadDim: 6, Dims: 4, Base: 10000, Scale: 0.5},
	} {
		t.Run(fmt.Sprintf("%d-of-%d/neox=%v", rc.Dims, rc.HeadDim, rc.NeoX), func(t *testing.T) {
			const heads = 3
			n, dim := len(rowCase.seqs), heads*rc.HeadDim
			r := rand.New(rand.NewPCG(uint64(n), uint64(dim)))
			x := normals(r, n*dim, 1)
			ff := make([]float32, rc.Dims/2)
			for i := range ff {
				ff[i] = 1
			}
			xb := floatBuffer(t, x)
			rows := buffer(t, 8*int64(n), AppendRowTable(nil, rowCase.seqs, rowCase.pos))
			run(t, func(s *vk.Sequence) error {
				return k.RopeRows(s, whole(xb), whole(xb), whole(rows), n, heads, rc)
			})
			got := read(t, xb, 0, n*dim)
			for i, p := range rowCase.pos {
				want, scale, maxTheta := ropeRef(x[i*dim:(i+1)*dim], 1, heads, int(p), rc, ff)
				compare(t, fmt.Sprintf("row %d (position %d)", i, p), got[i*dim:(i+1)*dim], want, scale, 1e-5+2e-6*maxTheta)
			}
		})
	}
}

// TestStoreKVRows stores each row, rotated and not, into its sequence's
// region of the cache at its position's slot in that region's ring; every
// other slot keeps what it held.
func TestStoreKVRows(t *testing.T) {
	k := setup(t)
	const seqs, ctx = 4, 8
	for _, rc := range []*RoPE{nil, {HeadDim: 32, Dims: 32, Base: 10000, Scale: 1}} {
		t.Run(fmt.Sprintf("rope=%v", rc != nil), func(t *testing.T) {
			const kvDim = 64
			n := len(rowCase.seqs)
			r := rand.New(rand.NewPCG(uint64(n), kvDim))
			src := normals(r, n*kvDim, 10)
			stored := make([]float64, len(src)) // what each row's slot should hold
			tol := make([]float64, len(src))
			for i, v := range src {
				stored[i] = float64(v)
			}
			if rc != nil {
				ff := []float32{}
				for range rc.Dims / 2 {
					ff = append(ff, 1)
				}
				for i, p := range rowCase.pos {
					want, scale, maxTheta := ropeRef(src[i*kvDim:(i+1)*kvDim], 1, kvDim/rc.HeadDim, int(p), *rc, ff)
					for j := range want {
						stored[i*kvDim+j] = want[j]
						tol[i*kvDim+j] = (1e-5 + 2e-6*maxTheta) * scale[j]
					}
				}
			}
			const sentinel = 0xA5
			init := make([]byte, 2*seqs*ctx*kvDim)
			for i := range init {
				init[i] = sentinel
			}
			cb := buffer(t, int64(len(init)), init)
			sb := floatBuffer(t, src)
			rows := buffer(t, 8*int64(n), AppendRowTable(nil, rowCase.seqs, rowCase.pos))
			run(t, func(s *vk.Sequence) error {
				return k.StoreKVRows(s, whole(cb), whole(sb), whole(rows), n, kvDim, ctx, seqs, rc)
			})
			got := make([]byte, len(init))
			if err := cb.Read(0, got); err != nil {
				t.Fatal(err)
			}
			vals := make([]float32, seqs*ctx*kvDim)
			if err := quant.Dequantize(quant.F16, got, vals); err != nil {
				t.Fatal(err)
			}
			owner := map[int]int{} // cache row → batch row stored there
			for i := range n {
				owner[int(rowCase.seqs[i])*ctx+int(rowCase.pos[i])%ctx] = i
			}
			bad := 0
			for row := range seqs * ctx {
				i, ok := owner[row]
				for j := range kvDim {
					o := row*kvDim + j
					var fine bool
					if ok {
						w := stored[i*kvDim+j]
						// f16 rounding (half an ulp of 2^-10 relative) plus the
						// rotation's error.
						fine = math.Abs(float64(vals[o])-w) <= math.Abs(w)/1024+6.2e-5+tol[i*kvDim+j]
					} else {
						fine = got[2*o] == sentinel && got[2*o+1] == sentinel
					}
					if !fine {
						if bad++; bad <= 5 {
							t.Errorf("cache row %d (sequence %d, slot %d) value %d = %v (stored by batch row %d: %v)", row, row/ctx, row%ctx, j, vals[o], i, ok)
						}
					}
				}
			}
		})
	}
}

// TestAttentionRows runs the plain attention kernel over rows that are one
// token each of their own sequence: each row must equal the reference of
// its sequence alone (its region of the caches, at its position), on a
// global layer and on a sliding window whose ring two sequences have
// wrapped; a fourth region holds keys no row may see.
func TestAttentionRows(t *testing.T) {
	k := setup(t)
	const seqs = 4
	for _, a := range []Attn{
		{Heads: 4, KVHeads: 2, HeadDim: 6, Ctx: 48},
		{Heads: 2, KVHeads: 1, HeadDim: 64, Ctx: 8, Window: 6},
	} {
		a.Scale = float32(1 / math.Sqrt(float64(a.HeadDim)))
		t.Run(fmt.Sprintf("d%d/ctx%d/w%d", a.HeadDim, a.Ctx, a.Window), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(a.Ctx), uint64(a.HeadDim)))
			n, qDim, kvDim := len(rowCase.seqs), a.Heads*a.HeadDim, a.KVHeads*a.HeadDim
			q := normals(r, n*qDim, 1)
			kraw, _ := f16s(normals(r, seqs*a.Ctx*kvDim, 2))
			vraw, _ := f16s(normals(r, seqs*a.Ctx*kvDim, 1))
			qb, db := floatBuffer(t, q), buffer(t, f32(n*qDim), nil)
			kb, vb := buffer(t, int64(len(kraw)), kraw), buffer(t, int64(len(vraw)), vraw)
			rows := buffer(t, 8*int64(n), AppendRowTable(nil, rowCase.seqs, rowCase.pos))
			run(t, func(s *vk.Sequence) error {
				return k.AttentionRows(s, whole(db), whole(qb), whole(kb), whole(vb), whole(rows), n, seqs, a)
			})
			got := read(t, db, 0, n*qDim)
			bits := func(raw []byte) []uint16 {
				b := make([]uint16, len(raw)/2)
				for i := range b {
					b[i] = uint16(raw[2*i]) | uint16(raw[2*i+1])<<8
				}
				return b
			}
			kbits, vbits := bits(kraw), bits(vraw)
			for i := range n {
				region := int(rowCase.seqs[i]) * a.Ctx * kvDim
				want, err := attention.Reference(attention.Problem{Queries: 1, Heads: a.Heads, KVHeads: a.KVHeads, HeadDim: a.HeadDim,
					Pos: int(rowCase.pos[i]), Window: a.Window, Slots: a.Ctx, Scale: float64(a.Scale), Q: q[i*qDim : (i+1)*qDim],
					K: kbits[region : region+a.Ctx*kvDim], V: vbits[region : region+a.Ctx*kvDim]})
				if err != nil {
					t.Fatal(err)
				}
				if e := attention.RelErr(got[i*qDim:(i+1)*qDim], want, a.HeadDim); !(e < 1e-4) {
					t.Errorf("row %d (sequence %d at %d): relative error %.3e", i, rowCase.seqs[i], rowCase.pos[i], e)
				}
			}
		})
	}
}
