package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/vkinfer/vkinfer/quant"
	"github.com/vkinfer/vkinfer/vk"
	"github.com/x448/float16"
)

// stackCase is a stacked product to check: matrices of rows[j] rows, the
// first ropeMats of them rotated, the last cacheMats stored in rings.
type stackCase struct {
	qt        quant.Type
	last      quant.Type // the last matrix's, where not qt (Stack.LastType)
	K, n      int
	rows      []int
	bias      bool
	rope      *RoPE
	factors   bool
	ropeMats  int // matrices 0..ropeMats-1 rotate
	cacheMats int // the last cacheMats matrices go to the cache
	pos       int
	slots     int
	shape     MatVecShape
	// The cache rings hold regions sequences (0 means 1); the columns are
	// of sequence seq at pos.., or with rows (Stack.Rows) column i is of
	// sequence seqRows.seqs[i] at seqRows.pos[i].
	regions, seq int
	seqRows      *struct{ seqs, pos []int32 }
}

// at is column col's position and sequence.
func (c stackCase) at(col int) (pos, seq int) {
	if c.seqRows != nil {
		return int(c.seqRows.pos[col]), int(c.seqRows.seqs[col])
	}
	return c.pos + col, c.seq
}

// TestMatVecStack checks the stacked product with its epilogues (bias,
// RoPE in both layouts with partial rotation and frequency factors, f16
// stores into cache rings that wrap, a batch longer than the ring) against
// float64 references, on f32 and 8-bit activations, weight types of
// 144-, 210- and 34-byte blocks and f16, awkward row counts and shapes.
func TestMatVecStack(t *testing.T) {
	k := setup(t)
	llama := &RoPE{HeadDim: 64, Dims: 64, Base: 500000, Scale: 1}
	neox := &RoPE{HeadDim: 80, Dims: 48, Base: 1e6, Scale: 0.5, NeoX: true}
	cases := []stackCase{
		// q, k and v of a small Llama layer, every epilogue.
		{qt: quant.Q4_K, K: 768, n: 1, rows: []int{384, 128, 128}, bias: true, rope: llama, factors: true,
			ropeMats: 2, cacheMats: 2, pos: 37, slots: 40},
		// Qwen2-like: NeoX with partial rotation, a ring that wraps far
		// past its first lap, three columns.
		{qt: quant.Q6_K, K: 512, n: 3, rows: []int{240, 80, 80}, bias: true, rope: neox,
			ropeMats: 2, cacheMats: 2, pos: 1003, slots: 8},
		// A batch longer than the ring keeps its last slots rows.
		{qt: quant.Q8_0, K: 96, n: 5, rows: []int{128, 64, 64}, rope: llama, ropeMats: 2, cacheMats: 2, pos: 2, slots: 4,
			shape: MatVecShape{Lanes: 16, Rows: 6, Unroll: 2}},
		// v alone into its cache (the layers where v's type differs).
		{qt: quant.Q6_K, K: 256, n: 1, rows: []int{130}, cacheMats: 1, pos: 9, slots: 10, shape: MatVecShape{Lanes: 32, Rows: 2, Unroll: 1}},
		// Plain stacks (head-normed archs): odd rows, odd shapes.
		{qt: quant.Q4_K, K: 512, n: 2, rows: []int{7, 257, 33}, shape: MatVecShape{Lanes: 64, Rows: 3, Unroll: 1}},
		{qt: quant.F16, K: 100, n: 1, rows: []int{255, 1}, bias: true},
		{qt: quant.Q4_0, K: 4128, n: 8, rows: []int{64, 64, 64}, rope: &RoPE{HeadDim: 32, Dims: 32, Base: 10000, Scale: 1, NeoX: true},
			ropeMats: 1, cacheMats: 1, pos: 100, slots: 200, shape: MatVecShape{Lanes: 64, Rows: 8, Unroll: 1}},
		// Sequence 1 of a cache of two: its region only.
		{qt: quant.Q8_0, K: 96, n: 2, rows: []int{128, 64, 64}, rope: llama, ropeMats: 2, cacheMats: 2, pos: 7, slots: 8,
			regions: 2, seq: 1},
		// Q4_K_M's layers with a Q6_K v: q and k rotated, k and v into
		// their caches, v of the other type; and Q6_K before Q4_K over
		// rows that end mid-workgroup, in an odd shape.
		{qt: quant.Q4_K, last: quant.Q6_K, K: 768, n: 2, rows: []int{384, 128, 128}, rope: llama, ropeMats: 2, cacheMats: 2,
			pos: 5, slots: 12},
		{qt: quant.Q6_K, last: quant.Q4_K, K: 512, n: 1, rows: []int{70, 50}, bias: true, shape: MatVecShape{Lanes: 32, Rows: 6, Unroll: 2}},
		{qt: quant.Q5_K, last: quant.Q6_K, K: 256, n: 3, rows: []int{8, 16, 24}, cacheMats: 1, pos: 3, slots: 4},
		// Columns of three sequences of four (issue 20's batched decode),
		// two past their ring's wrap, each rotated at its own position.
		{qt: quant.Q4_K, K: 256, n: 3, rows: []int{240, 80, 80}, bias: true, rope: neox, ropeMats: 2, cacheMats: 2, slots: 8,
			regions: 4, seqRows: &rowCase},
	}
	// The Llama and NeoX cases again at each subgroup size the device can
	// be asked for (the lane group then spans one or more whole subgroups).
	for _, w := range requiredWaves(t, k) {
		for _, c := range cases[:2] {
			c.shape = MatVecShape{Lanes: 64, Rows: 4, Unroll: 1, Wave: w}
			cases = append(cases, c)
		}
	}
	for i, c := range cases {
		for _, q8 := range []bool{false, true} {
			if q8 && (!HasQ8(c.qt) || c.last != 0 && !HasQ8(c.last)) {
				continue
			}
			if q8 && !k.info.IntegerDot {
				t.Logf("%s lacks integer dot products: the q8 stacks are not checked", k.info.Name)
				continue
			}
			types := c.qt.String()
			if c.last != 0 {
				types += "+" + c.last.String()
			}
			t.Run(fmt.Sprintf("%d/%s/K%d/n%d/%v/q8=%v", i, types, c.K, c.n, c.rows, q8), func(t *testing.T) {
				testStack(t, k, c, q8)
			})
		}
	}
}

// requiredWaves are the subgroup sizes of 32 and 64 that a pipeline can
// require on k's device; none where it cannot (lavapipe), which the log
// says.
func requiredWaves(t *testing.T, k *Kernels) []int {
	var ws []int
	for _, w := range []int{32, 64} {
		if k.info.SizeControl && k.info.MinSubgroupSize <= w && w <= k.info.MaxSubgroupSize {
			ws = append(ws, w)
		}
	}
	if len(ws) == 0 {
		t.Logf("%s: no subgroup size of 32 or 64 can be required; the stacks run at the driver's", k.info.Name)
	}
	return ws
}

// stackWeights uploads matrices of rows[j] x K random weights of type qt
// (the last of type last, where not 0) into one buffer, the first 256 bytes in and each next one at the next
// multiple of 16, and returns their bindings and exact values.
func stackWeights(t *testing.T, r *rand.Rand, qt, last quant.Type, K int, rows []int) ([]vk.Binding, [][]float32) {
	t.Helper()
	var raws [][]byte
	var deqs [][]float32
	offs := []int64{256}
	for j, m := range rows {
		typ := qt
		if j == len(rows)-1 && last != 0 {
			typ = last
		}
		raw, deq := quantized(t, r, typ, m, K)
		raws, deqs = append(raws, raw), append(deqs, deq)
		offs = append(offs, (offs[len(offs)-1]+int64(len(raw))+15)&^15)
	}
	wb := buffer(t, offs[len(offs)-1]+16, nil)
	var ws []vk.Binding
	for j, raw := range raws {
		if err := wb.Write(offs[j], pad4(raw)); err != nil {
			t.Fatal(err)
		}
		ws = append(ws, vk.Binding{Buf: wb, Off: offs[j], Size: round4(int64(len(raw)))})
	}
	return ws, deqs
}

// stackX returns random activations, their buffer in the form the stack
// reads (q8 rounded on the GPU with q8) and the values the GPU computes with.
func stackX(t *testing.T, k *Kernels, r *rand.Rand, n, K int, q8 bool) (vk.Binding, []float32) {
	t.Helper()
	x := normals(r, n*K, 1)
	if !q8 {
		return whole(floatBuffer(t, x)), x
	}
	raw := quantizeOnGPU(t, k, x, n, K)
	return whole(buffer(t, int64(len(raw)), raw)), q8Values(t, raw, x, n, K)
}

func testStack(t *testing.T, k *Kernels, c stackCase, q8 bool) {
	r := rand.New(rand.NewPCG(uint64(c.K), uint64(c.n*100+len(c.rows))))
	ws, deqs := stackWeights(t, r, c.qt, c.last, c.K, c.rows)
	xb, x := stackX(t, k, r, c.n, c.K, q8)
	step := u32Bytes(uint32(c.pos), uint32(c.seq))
	if c.seqRows != nil {
		step = AppendRowTable(nil, c.seqRows.seqs, c.seqRows.pos)
	}
	regions := max(c.regions, 1)
	st := Stack{Type: c.qt, LastType: c.last, N: c.n, K: c.K, X: xb, Q8: q8, Shape: c.shape, Slots: c.slots, Seqs: c.regions,
		Rows: c.seqRows != nil, Step: whole(buffer(t, int64(len(step)), step))}
	var ff []float32
	if c.rope != nil {
		st.Rope = *c.rope
		ff = make([]float32, c.rope.Dims/2)
		for i := range ff {
			ff[i] = 1
			if c.factors {
				ff[i] = float32(1 + 7*r.Float64())
			}
		}
		if c.factors {
			fb := whole(floatBuffer(t, ff))
			st.Rope.Factors = &fb
		}
	}
	const sentinel = 0xA5
	type ref struct{ want, tol []float64 }
	refs := make([]ref, len(c.rows))
	for j, m := range c.rows {
		want, scale := matRef(deqs[j], x, c.n, m, c.K)
		tol := make([]float64, len(want))
		for i := range tol {
			tol[i] = dotTol(c.K) * scale[i]
		}
		mat := StackMat{W: ws[j], Rows: m, Rope: j < c.ropeMats, Cache: j >= len(c.rows)-c.cacheMats}
		if c.bias {
			b := normals(r, m, 1)
			bb := whole(floatBuffer(t, b))
			mat.Bias = &bb
			for i := range want {
				want[i] += float64(b[i%m])
				tol[i] += 2 * eps32 * math.Abs(want[i])
			}
		}
		if mat.Rope {
			rp := st.Rope
			heads, half := m/rp.HeadDim, rp.Dims/2
			for col := 0; col < c.n; col++ {
				for h := 0; h < heads; h++ {
					base := col*m + h*rp.HeadDim
					for p := 0; p < half; p++ {
						a, b := base+2*p, base+2*p+1
						if rp.NeoX {
							a, b = base+p, base+p+half
						}
						at, _ := c.at(col)
						theta := float64(at) * float64(rp.Scale) *
							math.Pow(float64(rp.Base), -2*float64(p)/float64(rp.Dims)) / float64(ff[p])
						sin, cos := math.Sincos(theta)
						x0, x1 := want[a], want[b]
						want[a], want[b] = x0*cos-x1*sin, x0*sin+x1*cos
						// The sums' errors mix; the angle errs like
						// TestRope allows.
						e := tol[a] + tol[b] + (1e-5+2e-6*theta)*(math.Abs(x0)+math.Abs(x1))
						tol[a], tol[b] = e, e
					}
				}
			}
		}
		if mat.Cache {
			init := make([]byte, 2*regions*c.slots*m)
			for i := range init {
				init[i] = sentinel
			}
			mat.Out = whole(buffer(t, int64(len(init)), init))
		} else {
			mat.Out = whole(buffer(t, f32(c.n*m), nil))
		}
		st.Mats = append(st.Mats, mat)
		refs[j] = ref{want, tol}
	}
	run(t, func(s *vk.Sequence) error { return k.MatVecStack(s, st) })

	for j, m := range c.rows {
		mat, rf := st.Mats[j], refs[j]
		if !mat.Cache {
			got := read(t, mat.Out.Buf, 0, c.n*m)
			compare(t, fmt.Sprintf("matrix %d", j), got, rf.want, rf.tol, 1)
			continue
		}
		raw := make([]byte, 2*regions*c.slots*m)
		if err := mat.Out.Buf.Read(0, raw); err != nil {
			t.Fatal(err)
		}
		// The batch column stored in each cache row: the last whose
		// position is the row mod slots in its sequence's region.
		owner := map[int]int{}
		for col := range c.n {
			p, q := c.at(col)
			owner[q*c.slots+p%c.slots] = col
		}
		bad := 0
		for row := range regions * c.slots {
			col, ok := owner[row]
			if !ok {
				col = -1
			}
			for e := 0; e < m; e++ {
				h := uint16(raw[2*(row*m+e)]) | uint16(raw[2*(row*m+e)+1])<<8
				if col < 0 {
					if h != sentinel<<8|sentinel {
						if bad++; bad <= 5 {
							t.Errorf("matrix %d: cache row %d, untouched, holds %#04x at %d", j, row, h, e)
						}
					}
					continue
				}
				got := float64(float16.Frombits(h).Float32())
				want := rf.want[col*m+e]
				// One f16 ulp beyond the product's own error.
				tol := rf.tol[col*m+e] + math.Ldexp(math.Abs(want), -10) + 1e-7
				if !(math.Abs(got-want) <= tol) {
					if bad++; bad <= 5 {
						t.Errorf("matrix %d: cache[%d][%d] = %g, want %g ± %g", j, row, e, got, want, tol)
					}
				}
			}
		}
		if bad == 0 {
			t.Logf("matrix %d: %d cache rows checked", j, regions*c.slots)
		}
	}
}

// TestMatVecStackGated checks gate and up in one dispatch with the gated
// activation and its q8 copy (the last workgroup of each 32-value block
// rounds it), many times over in one submission and again in a second, so
// that counters left dirty by one dispatch would fail the next; block
// counts (33) and workgroups per block (1 to 32) that fit nothing evenly.
func TestMatVecStackGated(t *testing.T) {
	k := setup(t)
	type gatedCase struct {
		g     GLU
		qt    quant.Type
		K, n  int
		rows  int
		shape MatVecShape
	}
	var cases []gatedCase
	for _, c := range []gatedCase{
		{SwiGLU, quant.Q4_K, 512, 1, 1056, MatVecShape{}},
		{GeGLU, quant.Q6_K, 256, 3, 96, MatVecShape{Lanes: 32, Rows: 2, Unroll: 1}},
		{SwiGLU, quant.Q8_0, 160, 1, 1056, MatVecShape{Lanes: 64, Rows: 16, Unroll: 2}},
		{SwiGLU, quant.F16, 100, 2, 64, MatVecShape{Lanes: 16, Rows: 64, Unroll: 1}},
		{GeGLU, quant.Q4_0, 4096, 8, 32, MatVecShape{Lanes: 128, Rows: 4, Unroll: 1}},
	} {
		cases = append(cases, c)
	}
	for _, w := range requiredWaves(t, k) {
		cases = append(cases, gatedCase{SwiGLU, quant.Q4_K, 512, 1, 1056, MatVecShape{Lanes: 64, Rows: 2, Unroll: 1, Wave: w}})
	}
	for i, c := range cases {
		for _, q8 := range []bool{false, true} {
			if q8 && (!HasQ8(c.qt) || !k.info.IntegerDot) {
				continue
			}
			t.Run(fmt.Sprintf("%d/%s/%s/K%d/n%d/rows%d/q8=%v", i, c.g, c.qt, c.K, c.n, c.rows, q8), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(c.K), uint64(c.rows)))
				ws, deqs := stackWeights(t, r, c.qt, 0, c.K, []int{c.rows, c.rows})
				xb, x := stackX(t, k, r, c.n, c.K, q8)
				gate, gScale := matRef(deqs[0], x, c.n, c.rows, c.K)
				up, uScale := matRef(deqs[1], x, c.n, c.rows, c.K)
				want, tol := make([]float64, len(gate)), make([]float64, len(gate))
				for i := range want {
					act, y := gluRef(c.g, gate[i])
					want[i] = act * up[i]
					// act'(g) is at most about 1.1 (silu) or 1.13 (gelu).
					tol[i] = dotTol(c.K)*(1.2*gScale[i]*math.Abs(up[i])+math.Abs(act)*uScale[i]) +
						1e-5*math.Abs(want[i])*max(1, math.Abs(y)/10) + 1e-30
				}
				ob := buffer(t, f32(c.n*c.rows), nil)
				qb := whole(buffer(t, Q8Bytes(c.n, c.rows), nil))
				g := c.g
				st := Stack{Type: c.qt, N: c.n, K: c.K, X: xb, Q8: q8, Shape: c.shape, Gated: &g, GatedQ8: &qb,
					Mats: []StackMat{{W: ws[0], Rows: c.rows, Out: whole(ob)}, {W: ws[1], Rows: c.rows}}}
				const repeats = 17
				for range 2 {
					run(t, func(s *vk.Sequence) error {
						for i := range repeats {
							if i > 0 {
								s.Barrier()
							}
							if err := k.MatVecStack(s, st); err != nil {
								return err
							}
						}
						return nil
					})
					got := read(t, ob, 0, c.n*c.rows)
					compare(t, "act(gate)*up", got, want, tol, 1)
					q8Values(t, readBytes(t, qb.Buf), got, c.n, c.rows)
				}
			})
		}
	}
}

// TestMatVecStackRejects: stacks the kernel cannot run give errors.
func TestMatVecStackRejects(t *testing.T) {
	k := setup(t)
	w := whole(buffer(t, 1<<16, nil))
	other := whole(buffer(t, 1<<16, nil))
	out := whole(buffer(t, 1<<16, nil))
	g := SwiGLU
	base := func() Stack {
		return Stack{Type: quant.Q8_0, N: 1, K: 32, X: out, Step: out, Slots: 4,
			Mats: []StackMat{{W: w, Rows: 64, Out: out}, {W: w, Rows: 64, Out: out}}}
	}
	for name, edit := range map[string]func(*Stack){
		"no matrices":   func(s *Stack) { s.Mats = nil },
		"four matrices": func(s *Stack) { s.Mats = append(s.Mats, s.Mats...) },
		"two buffers":   func(s *Stack) { s.Mats[1].W = other },
		"nine columns":  func(s *Stack) { s.N = 9 },
		"odd rows of rope": func(s *Stack) {
			s.Mats[0].Rope, s.Rope, s.Shape = true, RoPE{HeadDim: 64, Dims: 64, Base: 1, Scale: 1}, MatVecShape{32, 3, 1, 0}
		},
		"neox in pairs": func(s *Stack) {
			s.Mats[0].Rope, s.Rope, s.Shape = true, RoPE{HeadDim: 64, Dims: 64, Base: 1, Scale: 1, NeoX: true}, MatVecShape{32, 2, 1, 0}
		},
		"partial heads":    func(s *Stack) { s.Mats[0].Rope, s.Rope = true, RoPE{HeadDim: 48, Dims: 48, Base: 1, Scale: 1} },
		"gated unequal":    func(s *Stack) { s.Gated, s.Mats[1].Rows = &g, 32 },
		"q8 without gated": func(s *Stack) { s.GatedQ8 = &out },
		"q8 blocks": func(s *Stack) {
			s.Gated, s.GatedQ8, s.Shape = &g, &out, MatVecShape{32, 6, 1, 0} // 3 rows of each: 32/3 is no count
		},
		"f16 q8": func(s *Stack) { s.Type, s.Q8 = quant.F16, true },
		// Mixed types: K-quants only, never gated.
		"q8_0 beside q6_k": func(s *Stack) { s.K, s.LastType = 256, quant.Q6_K },
		"mixed gated": func(s *Stack) {
			s.Type, s.LastType, s.K, s.Gated = quant.Q4_K, quant.Q6_K, 256, &g
		},
		"one mixed matrix": func(s *Stack) { s.Type, s.LastType, s.K, s.Mats = quant.Q4_K, quant.Q6_K, 256, s.Mats[:1] },
	} {
		st := base()
		edit(&st)
		if err := k.MatVecStack(nil, st); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
