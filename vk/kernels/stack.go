package kernels

import (
	"fmt"
	"math"

	"github.com/vkinfer/vkinfer/quant"
	"github.com/vkinfer/vkinfer/vk"
)

// MaxStack is the most matrices one stacked product takes.
const MaxStack = 3

// StackMat is one matrix of a stacked matrix-vector product (MatVecStack).
type StackMat struct {
	W    vk.Binding // the weights, in the buffer of every other matrix of the stack
	Rows int
	// Out receives the rows: f32 [n][Rows], or with Cache the f16 rings of
	// Stack.Seqs sequences, Stack.Slots rows of Rows values each (column i
	// at position pos+i of sequence s goes to row s·Slots + (pos+i) mod
	// Slots, as StoreKV writes).
	Out   vk.Binding
	Bias  *vk.Binding // Rows f32 values added to every column, or nil
	Rope  bool        // rotate the rows (whole heads) by Stack.Rope
	Cache bool
}

// Stack is a stacked matrix-vector product: the products of up to MaxStack
// matrices of one row length with the same activations, in one dispatch,
// all of one type but the last, which may be another K-quant (LastType),
// each matrix's rows finished where they are computed (bias,
// RoPE, the store into a KV-cache ring) or, with Gated, the gated
// activation of two matrices (gate and up) and its q8 copy. In decode it
// replaces the q, k and v products, RoPE and both KV stores (or the gate
// and up products and the activation) with one dispatch: each dispatch
// there costs mostly the wait for the one before.
type Stack struct {
	Mats []StackMat
	Type quant.Type
	// LastType is the type of the last matrix where it differs from Type
	// (Q4_K_M's Q6_K v beside Q4_K q and k); both must be K-quants. Zero
	// (F32, never mixed) means Type.
	LastType quant.Type
	N, K     int
	// X is f32 [N][K], or with Q8 the q8 layout (QuantizeQ8) read by the
	// integer dot products.
	X  vk.Binding
	Q8 bool
	// Shape is the geometry; zero takes StackShape's.
	Shape MatVecShape
	Rope  RoPE // for the matrices with Rope; Rope.Factors nil or Dims/2 values
	// Step holds, with Rope or Cache, the position of column 0 and its
	// sequence (uint32 each), or with Rows a (position, sequence) pair per
	// column (AppendRowTable).
	Step  vk.Binding
	Slots int // rows of each sequence's cache ring, with Cache
	Seqs  int // sequences the cache rings hold, with Cache; 0 means 1
	// Rows: the columns are one token each of distinct sequences.
	Rows bool
	// Gated (not nil): Mats are gate and up, of the same rows, and Mats[0].Out
	// gets act(gate) * up; GatedQ8 (not nil) its q8 copy too.
	Gated   *GLU
	GatedQ8 *vk.Binding
	// NormIn (with Q8): X is a folded norm's q8 copy (NormOut), the sums
	// scaled by its 1/rms before the epilogue.
	NormIn *NormIn
}

// StackMixes says whether a stack may mix t with another type of its
// kind: the K-quants, whose 256-value blocks all cut into eight 32-value
// slices (matvec_stack.glsl's LAST_QTYPE).
func StackMixes(t quant.Type) bool {
	return t == quant.Q4_K || t == quant.Q5_K || t == quant.Q6_K
}

// typeOf is the type of matrix j.
func (st *Stack) typeOf(j int) quant.Type {
	if j == len(st.Mats)-1 && st.LastType != 0 {
		return st.LastType
	}
	return st.Type
}

func (st *Stack) masks() (rope, cache, bias uint32) {
	for j, m := range st.Mats {
		if m.Rope {
			rope |= 1 << j
		}
		if m.Cache {
			cache |= 1 << j
		}
		if m.Bias != nil {
			bias |= 1 << j
		}
	}
	return rope, cache, bias
}

// StackShape is the geometry MatVecStack uses for st when st.Shape is zero:
// the shape of a plain product over all its rows (k.MatVecQ8For or
// k.MatVec), with Rows raised to what the epilogues need: an even count
// where rows are finished in pairs (RoPE, f16 cache words, gate beside
// up), a multiple of 4 for NeoX RoPE (two pairs i, i+dims/2 and their
// neighbours, for the f16 words), at least gatedRows for a gated stack of
// one column.
func (k *Kernels) StackShape(st *Stack) MatVecShape {
	if st.Shape != (MatVecShape{}) {
		return st.Shape
	}
	rows := 0
	for _, m := range st.Mats {
		rows += m.Rows
	}
	sh := k.MatVec
	if st.Q8 {
		sh = k.MatVecQ8For(rows, st.K)
	}
	rope, cache, _ := st.masks()
	step := 1
	if rope != 0 || cache != 0 || st.Gated != nil {
		step = 2
	}
	if rope != 0 && st.Rope.NeoX {
		step = 4
	}
	sh.Rows = ceil(sh.Rows, step) * step
	if st.Gated != nil && st.N == 1 {
		// One column: a batch's accumulators are rows × columns, and at 8
		// rows RADV's passes of 2 to 8 sequences lost occupancy (polaris10
		// 256 VGPRs from 2 sequences, navi31 192 at 8; docs/AMD.md).
		sh.Rows = max(sh.Rows, gatedRows)
	}
	return sh
}

// stackGroups is the workgroup end of each matrix of st in shape sh.
func stackGroups(st *Stack, sh MatVecShape) [MaxStack]int {
	var g [MaxStack]int
	if st.Gated != nil {
		g[0] = ceil(st.Mats[0].Rows, sh.Rows/2)
		g[1], g[2] = g[0], g[0]
		return g
	}
	end := 0
	for j := range MaxStack {
		if j < len(st.Mats) {
			end += ceil(st.Mats[j].Rows, sh.Rows)
		}
		g[j] = end
	}
	return g
}

// checkStack validates st's shape and flags (not its bindings).
func (k *Kernels) checkStack(st *Stack, sh MatVecShape) error {
	const op = "matvec_stack"
	n := len(st.Mats)
	if n < 1 || n > MaxStack {
		return fmt.Errorf("kernels: %s: %d matrices, want 1 to %d", op, n, MaxStack)
	}
	if st.N < 1 || st.N > MaxMatVecCols {
		return fmt.Errorf("kernels: %s: %d columns, want 1 to %d", op, st.N, MaxMatVecCols)
	}
	last := st.typeOf(n - 1)
	if last != st.Type {
		if !StackMixes(st.Type) || !StackMixes(last) || n < 2 || st.Gated != nil {
			return fmt.Errorf("kernels: %s: a last matrix of type %s after %s: mixed types need K-quants, two matrices or more, no gated activation: %w",
				op, last, st.Type, quant.ErrUnsupported)
		}
	}
	for _, t := range []quant.Type{st.Type, last} {
		if st.Q8 && !HasQ8(t) {
			return fmt.Errorf("kernels: %s: 8-bit activations with weights of type %s: %w", op, t, quant.ErrUnsupported)
		}
	}
	if st.Q8 && !k.info.IntegerDot {
		return fmt.Errorf("kernels: %s: the device lacks the integer dot product feature", op)
	}
	if sh.Lanes < 1 || sh.Rows < 1 || sh.Unroll < 1 || sh.Lanes > k.info.MaxWorkgroupInvocations {
		return fmt.Errorf("kernels: %s: shape %+v", op, sh)
	}
	rope, cache, bias := st.masks()
	if (rope != 0 || cache != 0 || st.Gated != nil) && sh.Rows%2 != 0 {
		return fmt.Errorf("kernels: %s: shape %v: rows finished in pairs need an even row count", op, sh)
	}
	if rope != 0 {
		r := st.Rope
		if _, err := r.check(k, op); err != nil {
			return err
		}
		if r.NeoX && (r.Dims%4 != 0 || sh.Rows%4 != 0) {
			return fmt.Errorf("kernels: %s: NeoX RoPE of %d dims in shape %v: both need a multiple of 4", op, r.Dims, sh)
		}
	}
	for j, m := range st.Mats {
		if _, err := weightRow(op, st.typeOf(j), m.Rows, st.K); err != nil {
			return err
		}
		if m.Rope && m.Rows%st.Rope.HeadDim != 0 {
			return fmt.Errorf("kernels: %s: matrix %d: %d rows are not whole heads of %d", op, j, m.Rows, st.Rope.HeadDim)
		}
		if m.Cache && (m.Rows%2 != 0 || st.Slots < 1) {
			return fmt.Errorf("kernels: %s: matrix %d: cache rows of %d values, %d slots", op, j, m.Rows, st.Slots)
		}
	}
	if g := st.Gated; g != nil {
		if err := g.check(); err != nil {
			return err
		}
		if n != 2 || st.Mats[1].Rows != st.Mats[0].Rows || rope|cache|bias != 0 {
			return fmt.Errorf("kernels: %s: a gated stack is two plain matrices of the same rows", op)
		}
		if st.GatedQ8 != nil && (st.Mats[0].Rows%32 != 0 || 32%(sh.Rows/2) != 0) {
			return fmt.Errorf("kernels: %s: q8 copy of rows of %d values in shape %v: need whole blocks of 32, and half the rows dividing 32", op, st.Mats[0].Rows, sh)
		}
	} else if st.GatedQ8 != nil {
		return fmt.Errorf("kernels: %s: a q8 copy without a gated activation", op)
	}
	return nil
}

// MatVecStack records the stacked product st.
func (k *Kernels) MatVecStack(s *vk.Sequence, st Stack) error {
	const op = "matvec_stack"
	sh := k.StackShape(&st)
	if err := k.checkStack(&st, sh); err != nil {
		return err
	}
	rb, err := weightRow(op, st.Type, 1, st.K)
	if err != nil {
		return err
	}
	lastRB, err := weightRow(op, st.typeOf(len(st.Mats)-1), 1, st.K)
	if err != nil {
		return err
	}
	xSize := f32(st.N * st.K)
	if st.Q8 {
		xSize = Q8Bytes(st.N, st.K)
		if err := vec4Aligned(op, st.X); err != nil {
			return err
		}
	}
	if err := need(op+" x", st.X, xSize); err != nil {
		return err
	}
	// One binding spans every matrix: each is addressed by its offset in it.
	buf := st.Mats[0].W.Buf
	lo, hi := int64(math.MaxInt64), int64(0)
	for j, m := range st.Mats {
		if m.W.Buf != buf {
			return fmt.Errorf("kernels: %s: matrix %d's weights are in another buffer than matrix 0's", op, j)
		}
		if m.W.Off%16 != 0 {
			return fmt.Errorf("kernels: %s: weights at offset %d: need a multiple of 16", op, m.W.Off)
		}
		bytes := int64(rb)
		if j == len(st.Mats)-1 {
			bytes = int64(lastRB)
		}
		bytes = round4(int64(m.Rows) * bytes)
		if err := need(fmt.Sprintf("%s weights %d", op, j), m.W, bytes); err != nil {
			return err
		}
		lo, hi = min(lo, m.W.Off), max(hi, m.W.Off+bytes)
	}
	if hi-lo > math.MaxUint32 {
		return fmt.Errorf("kernels: %s: the matrices span %d bytes, more than 32-bit offsets reach", op, hi-lo)
	}
	w := vk.Binding{Buf: buf, Off: lo, Size: hi - lo}

	noIn, err := k.unusedInput()
	if err != nil {
		return err
	}
	// Outputs a variant does not write are bound to the first matrix's
	// output, a buffer the dispatch writes anyway, so that no placeholder is
	// shared by dispatches that run without a barrier between them.
	outs := [MaxStack]vk.Binding{}
	bias := [MaxStack]vk.Binding{noIn, noIn, noIn}
	var off [MaxStack]uint32
	var rows [MaxStack]uint32
	for j := range MaxStack {
		outs[j] = st.Mats[0].Out
		if j >= len(st.Mats) {
			continue
		}
		m := st.Mats[j]
		off[j], rows[j] = uint32(m.W.Off-lo), uint32(m.Rows)
		if st.Gated != nil && j > 0 {
			continue // up's rows meet gate's; only Mats[0].Out is written
		}
		size := f32(st.N * m.Rows)
		if m.Cache {
			size = 2 * int64(max(st.Seqs, 1)) * int64(st.Slots) * int64(m.Rows)
		}
		if err := need(fmt.Sprintf("%s out %d", op, j), m.Out, size); err != nil {
			return err
		}
		outs[j] = m.Out
		if m.Bias != nil {
			if err := need(fmt.Sprintf("%s bias %d", op, j), *m.Bias, f32(m.Rows)); err != nil {
				return err
			}
			bias[j] = *m.Bias
		}
	}
	rope, cache, _ := st.masks()
	step, factors := noIn, noIn
	if rope != 0 || cache != 0 {
		if err := need(op+" step", st.Step, stepBytes(st.N, st.Rows)); err != nil {
			return err
		}
		step = st.Step
	}
	r := st.Rope
	if rope == 0 {
		// The shader reads none of these; a valid identity keeps them sane.
		r = RoPE{HeadDim: 2, Dims: 2, Base: 1, Scale: 1}
	} else if factors, err = r.check(k, op); err != nil {
		return err
	}
	q8, counts := st.Mats[0].Out, st.Mats[0].Out
	if st.GatedQ8 != nil {
		if err := need(op+" q8", *st.GatedQ8, Q8Bytes(st.N, st.Mats[0].Rows)); err != nil {
			return err
		}
		q8 = *st.GatedQ8
		if counts, err = k.counters(st.Mats[0].Rows / 32); err != nil {
			return err
		}
	}
	if st.NormIn != nil && !st.Q8 {
		return fmt.Errorf("kernels: %s: a folded norm's copy is in 8 bits", op)
	}
	_, parts, err := k.normBindings(op, nil, st.NormIn, st.N, 0, st.K)
	if err != nil {
		return err
	}
	p, err := k.pipeline(k.StackSpec(&st))
	if err != nil {
		return err
	}
	g := stackGroups(&st, sh)
	gx, gy := k.grid(g[len(st.Mats)-1])
	label := ""
	for j, m := range st.Mats {
		if j > 0 {
			label += "+"
		}
		label += fmt.Sprint(m.Rows)
	}
	types := st.Type.String()
	if last := st.typeOf(len(st.Mats) - 1); last != st.Type {
		types += "+" + last.String()
	}
	s.Label(fmt.Sprintf("%sx%d %s", label, st.K, types))
	s.Dispatch(p, []vk.Binding{outs[0], w, st.X, outs[1], outs[2], bias[0], bias[1], bias[2], step, factors, q8, counts, parts},
		vk.Push(uint32(st.K), uint32(rb), rows[0], rows[1], rows[2], off[0], off[1], off[2],
			uint32(g[0]), uint32(g[1]), uint32(g[2]), uint32(r.HeadDim), uint32(r.Dims),
			float32(math.Log2(float64(r.Base))), r.Scale, uint32(st.Slots), uint32(lastRB)),
		gx, gy, 1)
	return nil
}

// StackSpec is the pipeline MatVecStack builds for st; only its types,
// shapes and flags count (the plan's stacks have no bindings).
func (k *Kernels) StackSpec(st *Stack) vk.PipelineSpec {
	sh := k.StackShape(st)
	name := "matvec_stack"
	if st.Q8 {
		name = "matvec_stack_q8"
	}
	rope, cache, bias := st.masks()
	gated := uint32(0)
	if st.Gated != nil {
		gated = 1 + uint32(*st.Gated)
	}
	role := roleOf(nil, st.NormIn)
	return spec(name, 13, 68, sh.Wave,
		uint32(sh.Lanes), uint32(st.Type), uint32(st.N), uint32(sh.Rows), k.subgroups(sh.Lanes), uint32(sh.Unroll), 0,
		uint32(len(st.Mats)), rope, cache, bias, b32(rope != 0 && st.Rope.NeoX), b32(rope != 0 && st.Rope.Factors != nil),
		gated, b32(st.GatedQ8 != nil), b32(st.Rows), uint32(st.typeOf(len(st.Mats)-1)), b32(role.in), math.Float32bits(role.eps))
}

// countBlock is the size of a block of counters in words (64 KiB).
const countBlock = 16384

// counters takes n zeroed counters for one recording (MatVecStack's q8
// blocks); the kernel leaves them at zero. Each recording takes its own,
// so that dispatches running without a barrier between them never share
// one.
func (k *Kernels) counters(n int) (vk.Binding, error) {
	k.dummyMu.Lock()
	defer k.dummyMu.Unlock()
	// Offsets stay aligned for any device's storage bindings (256 bytes).
	n = (n + 63) &^ 63
	if len(k.counts) == 0 || k.countsUsed+n > countBlock {
		words := max(n, countBlock)
		b, err := k.dev.NewBuffer(4*int64(words), false)
		if err != nil {
			return vk.Binding{}, fmt.Errorf("kernels: counters: %w", err)
		}
		if err := b.Write(0, make([]byte, 4*words)); err != nil {
			b.Free()
			return vk.Binding{}, fmt.Errorf("kernels: counters: %w", err)
		}
		k.counts, k.countsUsed = append(k.counts, b), 0
	}
	c := vk.Binding{Buf: k.counts[len(k.counts)-1], Off: 4 * int64(k.countsUsed), Size: 4 * int64(n)}
	k.countsUsed += n
	return c, nil
}
