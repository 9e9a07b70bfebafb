package kernels

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/vkinfer/vkinfer/quant"
	"github.com/vkinfer/vkinfer/vk"
)

// WeightTypes are the tensor types dequant.glsl decodes.
var WeightTypes = []quant.Type{quant.F32, quant.F16, quant.BF16, quant.Q8_0, quant.Q4_0, quant.Q4_K, quant.Q5_K, quant.Q6_K}

func isFloat(t quant.Type) bool { return t == quant.F32 || t == quant.F16 || t == quant.BF16 }

// weightRow validates a rows x K matrix of type t and returns its row size in
// bytes. Quantized rows are whole blocks; float rows hold a multiple of 4
// values because the shaders read activations as vec4.
func weightRow(op string, t quant.Type, rows, K int) (int, error) {
	ok := false
	for _, w := range WeightTypes {
		ok = ok || w == t
	}
	if !ok {
		return 0, fmt.Errorf("kernels: %s: weights of type %s: %w", op, t, quant.ErrUnsupported)
	}
	if rows < 1 || K < 1 {
		return 0, fmt.Errorf("kernels: %s: %dx%d weight matrix", op, rows, K)
	}
	if isFloat(t) && K%4 != 0 {
		return 0, fmt.Errorf("kernels: %s: %s rows of %d values: need a multiple of 4", op, t, K)
	}
	rb, err := t.RowBytes(K)
	if err != nil {
		return 0, fmt.Errorf("kernels: %s: %w", op, err)
	}
	if err := positive(op, rows, rb); err != nil { // weight byte offsets
		return 0, err
	}
	return rb, nil
}

// checkMatrix validates the operands of dst[n][rows] = x[n][K] . W^T, x
// holding xSize bytes, and returns W's row size.
func checkMatrix(op string, dst, w, x vk.Binding, xSize int64, t quant.Type, n, rows, K int) (int, error) {
	rb, err := weightRow(op, t, rows, K)
	if err != nil {
		return 0, err
	}
	if err := positive(op, n, rows); err != nil { // dst indices
		return 0, err
	}
	if err := positive(op, n, K); err != nil { // x indices
		return 0, err
	}
	if err := need(op+" dst", dst, f32(n*rows)); err != nil {
		return 0, err
	}
	if err := need(op+" weights", w, round4(int64(rows)*int64(rb))); err != nil {
		return 0, err
	}
	return rb, need(op+" x", x, xSize)
}

// MatMul records dst[n][rows] = x[n][K] . W^T for a rows x K weight matrix W
// of type t: the matrix-vector kernel with shape k.MatVec where it takes n
// columns (MatVecTakes: decode), the tiled kernel with k.Tile above (prefill).
// k.Tile.F16 applies to quantized weights only: rounding their dequantized
// values to f16 costs far less than the quantization did, while float
// weights keep their exact values (and BF16/F32 ones may exceed f16 range).
// k.Tile.X16 (f16 activations) applies to every weight type.
func (k *Kernels) MatMul(s *vk.Sequence, dst, w, x vk.Binding, t quant.Type, n, rows, K int) error {
	if k.MatVecTakes(n) {
		return k.MatVecWith(s, dst, w, x, t, n, rows, K, k.MatVec)
	}
	return k.MatMulTiled(s, dst, w, x, t, n, rows, K, k.TileFor(t))
}

// ProductSpec is the pipeline MatMul builds for n columns of activations
// and weights of type t.
func (k *Kernels) ProductSpec(t quant.Type, n int) vk.PipelineSpec {
	if k.MatVecTakes(n) {
		return k.MatVecSpec(t, n, k.MatVec, false, false)
	}
	return k.MatMulSpec(t, k.TileFor(t))
}

// TileFor is the tile MatMul uses for weights of type t.
func (k *Kernels) TileFor(t quant.Type) Tile {
	tile := k.Tile
	tile.F16 = tile.F16 && !isFloat(t)
	return tile
}

// MatVecWith records the matrix-vector kernel with an explicit shape for
// n >= 1 activation columns (MaxMatVecCols at a time).
func (k *Kernels) MatVecWith(s *vk.Sequence, dst, w, x vk.Binding, t quant.Type, n, rows, K int, sh MatVecShape) error {
	return k.matVec(s, dst, w, x, nil, false, t, n, rows, K, sh, nil, nil)
}

// MatVecAdd records dst = r + W·x for n >= 1 columns,
// the residual added by the matrix-vector kernel as it writes; dst may be r.
func (k *Kernels) MatVecAdd(s *vk.Sequence, dst, w, x, r vk.Binding, t quant.Type, n, rows, K int) error {
	return k.matVec(s, dst, w, x, &r, false, t, n, rows, K, k.MatVec, nil, nil)
}

// HasQ8 says whether the 8-bit-activation matrix-vector kernel takes weights
// of type t: the quantized types, whose quants stay integers.
func HasQ8(t quant.Type) bool {
	switch t {
	case quant.Q8_0, quant.Q4_0, quant.Q4_K, quant.Q5_K, quant.Q6_K:
		return true
	}
	return false
}

// Q8Bytes is the size of n columns of K activations in the q8 layout that
// QuantizeQ8 writes and MatVecQ8With reads: n*K int8 values, then one f32
// scale per 32 of them.
func Q8Bytes(n, K int) int64 { return int64(n)*int64(K) + f32(n*K/32) }

// DecodeQ8 returns the values q*d that raw holds in the q8 layout, for n
// columns of K (a multiple of 32): what matvec_q8 computes with.
func DecodeQ8(raw []byte, n, K int) ([]float32, error) {
	if n < 1 || K < 1 || K%32 != 0 || int64(len(raw)) < Q8Bytes(n, K) {
		return nil, fmt.Errorf("kernels: %d bytes of q8 for %d columns of %d", len(raw), n, K)
	}
	v := make([]float32, n*K)
	for i := range v {
		d := math.Float32frombits(binary.LittleEndian.Uint32(raw[n*K+4*(i/32):]))
		v[i] = float32(int8(raw[i])) * d
	}
	return v, nil
}

// QuantizeQ8 records the rounding of n columns of K f32 activations (K a
// multiple of 32) to the q8 layout in dst (quantize_q8.comp).
func (k *Kernels) QuantizeQ8(s *vk.Sequence, dst, x vk.Binding, n, K int) error {
	return k.quantizeQ8(s, q8Copy, dst, x, nil, nil, n, K)
}

// GatedQ8 records out = act(gate) * up for activation g over n columns of
// K values (K a multiple of 32), written both as f32 to out and in the q8
// layout to dst: decode's gated FFN activation fused with the rounding of
// its result.
func (k *Kernels) GatedQ8(s *vk.Sequence, g GLU, dst, out, gate, up vk.Binding, n, K int) error {
	if err := g.check(); err != nil {
		return err
	}
	return k.quantizeQ8(s, g.q8Op(), dst, gate, &up, &out, n, K)
}

// Operations of quantize_q8.comp (its OP specialization constant).
const (
	q8Copy   = 0
	q8SwiGLU = 1
	q8GeGLU  = 2
)

// q8Op is g's OP in quantize_q8.comp.
func (g GLU) q8Op() uint32 {
	if g == GeGLU {
		return q8GeGLU
	}
	return q8SwiGLU
}

// quantizeQ8 records quantize_q8: of x alone (op q8Copy), or (y and out
// not nil) of act(x) * y, also written to out.
func (k *Kernels) quantizeQ8(s *vk.Sequence, op uint32, dst, x vk.Binding, y, out *vk.Binding, n, K int) error {
	if err := positive("quantize_q8", n, K); err != nil {
		return err
	}
	if K%32 != 0 {
		return fmt.Errorf("kernels: quantize_q8: rows of %d values: need a multiple of 32", K)
	}
	ins := []vk.Binding{x}
	var yb, ob vk.Binding
	if y != nil {
		ins, yb, ob = []vk.Binding{x, *y, *out}, *y, *out
	} else {
		unused, err := k.unused()
		if err != nil {
			return err
		}
		yb, ob = unused, unused
	}
	for _, b := range ins {
		if err := need("quantize_q8 operand", b, f32(n*K)); err != nil {
			return err
		}
	}
	if err := vec4Aligned("quantize_q8", ins...); err != nil {
		return err
	}
	if err := need("quantize_q8 dst", dst, Q8Bytes(n, K)); err != nil {
		return err
	}
	p, err := k.pipeline(quantizeQ8Spec(op))
	if err != nil {
		return err
	}
	blocks := n * K / 32
	gx, gy := k.grid(ceil(blocks, Lanes))
	switch op {
	case q8SwiGLU:
		s.Label("swiglu")
	case q8GeGLU:
		s.Label("geglu")
	}
	s.Dispatch(p, []vk.Binding{dst, x, yb, ob}, vk.Push(uint32(blocks)), gx, gy, 1)
	return nil
}

func quantizeQ8Spec(op uint32) vk.PipelineSpec { return spec("quantize_q8", 4, 4, 0, Lanes, op) }

// QuantizeQ8Spec is the pipeline QuantizeQ8 builds.
func (k *Kernels) QuantizeQ8Spec() vk.PipelineSpec { return quantizeQ8Spec(q8Copy) }

// GatedQ8Spec is the pipeline GatedQ8 builds for g.
func (k *Kernels) GatedQ8Spec(g GLU) vk.PipelineSpec { return quantizeQ8Spec(g.q8Op()) }

// MatVecQ8With records dst = W·x (+ r when r is not nil; dst may be r) for
// n columns of activations xq in the q8 layout (QuantizeQ8), for weight
// types where HasQ8 holds. The products are the integer dot products of
// the quants with the 8-bit activations, which need the device's
// IntegerDot feature.
func (k *Kernels) MatVecQ8With(s *vk.Sequence, dst, w, xq vk.Binding, r *vk.Binding, t quant.Type, n, rows, K int, sh MatVecShape) error {
	return k.MatVecQ8Norm(s, dst, w, xq, r, t, n, rows, K, sh, nil, nil)
}

// MatVecQ8Norm is MatVecQ8With with a folded RMSNorm: out (with r) writes
// what the products after the norm of dst need; in scales the products of
// xq, the q8 copy such a product wrote, by the norm's 1/rms. At most one
// of them.
func (k *Kernels) MatVecQ8Norm(s *vk.Sequence, dst, w, xq vk.Binding, r *vk.Binding, t quant.Type, n, rows, K int, sh MatVecShape, out *NormOut, in *NormIn) error {
	if err := k.q8Ready("matvec_q8", t); err != nil {
		return err
	}
	if err := vec4Aligned("matvec_q8", xq); err != nil { // read as 16- and 8-byte words
		return err
	}
	if out != nil && r == nil {
		return fmt.Errorf("kernels: matvec_q8: a folded norm needs the residual it normalises")
	}
	if out != nil && !FoldRows(sh.Rows) {
		return fmt.Errorf("kernels: matvec_q8: a folded norm with %d rows a workgroup: need a divisor or a multiple of 32", sh.Rows)
	}
	return k.matVec(s, dst, w, xq, r, true, t, n, rows, K, sh, out, in)
}

// matVec records matvec (f32 activations x) or, with q8, matvec_q8 (x in
// the q8 layout), plus the residual r where it is not nil, with a folded
// norm's roles (q8 only).
func (k *Kernels) matVec(s *vk.Sequence, dst, w, x vk.Binding, r *vk.Binding, q8 bool, t quant.Type, n, rows, K int, sh MatVecShape, out *NormOut, in *NormIn) error {
	xSize, name := f32(n*K), "matvec"
	if q8 {
		xSize, name = Q8Bytes(n, K), "matvec_q8"
	}
	rb, err := checkMatrix(name, dst, w, x, xSize, t, n, rows, K)
	if err != nil {
		return err
	}
	if sh.Lanes < 1 || sh.Rows < 1 || sh.Unroll < 1 || sh.Lanes > k.info.MaxWorkgroupInvocations {
		return fmt.Errorf("kernels: %s: shape %+v", name, sh)
	}
	// The shader reads K-quant and F32 weights as 16-byte words.
	if w.Off%16 != 0 {
		return fmt.Errorf("kernels: %s: weights at offset %d: need a multiple of 16", name, w.Off)
	}
	var res vk.Binding
	if r != nil {
		if err := need(name+" residual", *r, f32(n*rows)); err != nil {
			return err
		}
		res = *r
	} else if res, err = k.unusedInput(); err != nil {
		return err
	}
	nb, parts, err := k.normBindings(name, out, in, n, rows, K)
	if err != nil {
		return err
	}
	p, err := k.pipeline(k.matVecSpec(t, n, sh, r != nil, q8, roleOf(out, in)))
	if err != nil {
		return err
	}
	groups := ceil(rows, sh.Rows)
	gx, gy := k.grid(groups)
	s.Label(fmt.Sprintf("%dx%d %s", rows, K, t))
	s.Dispatch(p, []vk.Binding{dst, w, x, res, nb[0], nb[1], nb[2], nb[3], parts},
		vk.Push(uint32(rows), uint32(K), uint32(rb), uint32(groups)), gx, gy, 1)
	return nil
}

// MatVecSpec is the pipeline of the matrix-vector product of n columns
// with weights of type t in shape sh, with the residual added as it writes
// (MatVecAdd, or MatVecQ8With with r), on 8-bit activations with q8
// (matvec_q8, MatVecQ8With) or on f32 ones (matvec).
func (k *Kernels) MatVecSpec(t quant.Type, n int, sh MatVecShape, residual, q8 bool) vk.PipelineSpec {
	return k.matVecSpec(t, n, sh, residual, q8, normRole{})
}

// MatVecNormSpec is the pipeline MatVecQ8Norm builds: with out, or with
// in and the norm's eps.
func (k *Kernels) MatVecNormSpec(t quant.Type, n int, sh MatVecShape, residual, out, in bool, eps float32) vk.PipelineSpec {
	r := normRole{out: out, in: in}
	if in {
		r.eps = eps
	}
	return k.matVecSpec(t, n, sh, residual, true, r)
}

func (k *Kernels) matVecSpec(t quant.Type, n int, sh MatVecShape, residual, q8 bool, role normRole) vk.PipelineSpec {
	name := "matvec"
	if q8 {
		name = "matvec_q8"
	}
	group, cols := matVecGroup(n)
	return spec(name, 9, 16, sh.Wave, append([]uint32{
		uint32(sh.Lanes), uint32(t), uint32(group), uint32(sh.Rows), k.subgroups(sh.Lanes), uint32(sh.Unroll), b32(residual), uint32(cols)},
		role.constants()...)...)
}

// matVecGroup is how matvec.glsl takes n columns: groups of group columns
// (NCOLS), the fewest groups of at most MaxMatVecCols and as even as they
// can be, so the last repeats as few columns as possible; and cols (COLS),
// n where there is more than one group, else 0, the pipeline of one group.
func matVecGroup(n int) (group, cols int) {
	if n <= MaxMatVecCols {
		return n, 0
	}
	groups := ceil(n, MaxMatVecCols)
	return ceil(n, groups), n
}

// MatMulTiled records the tiled matrix-matrix kernel with an explicit tile
// for any n.
func (k *Kernels) MatMulTiled(s *vk.Sequence, dst, w, x vk.Binding, t quant.Type, n, rows, K int, tile Tile) error {
	rb, err := checkMatrix("matmul", dst, w, x, f32(n*K), t, n, rows, K)
	if err != nil {
		return err
	}
	if err := k.checkF32Tile("matmul", tile, t, 0); err != nil {
		return err
	}
	return k.dispatchTiles(s, "matmul", k.MatMulSpec(t, tile), dst, w, x, t, n, rows, K, rb, tile.BM, tile.BN)
}

// dispatchTiles records a tiled matrix product of the three bindings
// (dst, weights, activations): one workgroup per bm x bn tile of the
// rows x n result, labelled with the matrix for profiles.
func (k *Kernels) dispatchTiles(s *vk.Sequence, name string, ps vk.PipelineSpec, dst, w, x vk.Binding, t quant.Type, n, rows, K, rb, bm, bn int) error {
	gx, gy := ceil(rows, bm), ceil(n, bn)
	if gx > int(k.info.MaxWorkgroupCount[0]) || gy > int(k.info.MaxWorkgroupCount[1]) {
		return fmt.Errorf("kernels: %s: %dx%d tiles exceed the device's workgroup grid", name, gx, gy)
	}
	p, err := k.pipeline(ps)
	if err != nil {
		return err
	}
	s.Label(fmt.Sprintf("%dx%d %s", rows, K, t))
	s.Dispatch(p, []vk.Binding{dst, w, x}, vk.Push(uint32(rows), uint32(n), uint32(K), uint32(rb)), uint32(gx), uint32(gy), 1)
	return nil
}

// MatMulSpec is the pipeline MatMulTiled builds for weights of type t.
func (k *Kernels) MatMulSpec(t quant.Type, tile Tile) vk.PipelineSpec {
	return spec("matmul", 3, 16, 0, uint32(tile.Invocations()), uint32(t),
		uint32(tile.BM), uint32(tile.BN), uint32(tile.TM), uint32(tile.TN), b32(tile.F16), b32(tile.X16),
		uint32(tile.chunk(t)))
}

// MatMulQ8 records the tiled product with 8-bit activations and integer
// dot products (matmul_q8.glsl): dst = W·x for n columns of activations xq
// in the q8 layout (QuantizeQ8), weights of a type where HasQ8 holds. Of
// the tile it uses BM, BN, TM, TN and KB (the activation chunk: 32 or 64,
// 0 meaning 64).
func (k *Kernels) MatMulQ8(s *vk.Sequence, dst, w, xq vk.Binding, t quant.Type, n, rows, K int, tile Tile) error {
	if err := k.q8Ready("matmul_q8", t); err != nil {
		return err
	}
	rb, err := checkMatrix("matmul_q8", dst, w, xq, Q8Bytes(n, K), t, n, rows, K)
	if err != nil {
		return err
	}
	if err := k.checkQ8Tile("matmul_q8", tile, t, w, xq, 0); err != nil {
		return err
	}
	return k.dispatchTiles(s, "matmul_q8", k.MatMulQ8Spec(t, tile), dst, w, xq, t, n, rows, K, rb, tile.BM, tile.BN)
}

// MatMulQ8Spec is the pipeline MatMulQ8 builds for weights of type t.
func (k *Kernels) MatMulQ8Spec(t quant.Type, tile Tile) vk.PipelineSpec {
	return spec("matmul_q8", 3, 16, 0, uint32(tile.Invocations()), uint32(t),
		uint32(tile.BM), uint32(tile.BN), uint32(tile.TM), uint32(tile.TN), uint32(tile.q8Chunk(t)))
}

// q8Ready reports whether product name can take 8-bit activations with
// weights of type t on this device: the quants' integer dot products need
// both.
func (k *Kernels) q8Ready(name string, t quant.Type) error {
	if !HasQ8(t) {
		return fmt.Errorf("kernels: %s: weights of type %s: %w", name, t, quant.ErrUnsupported)
	}
	if !k.info.IntegerDot {
		return fmt.Errorf("kernels: %s: the device lacks the integer dot product feature", name)
	}
	return nil
}

// checkF32Tile reports whether tile can run product name (matmul or its
// gathered variant, whose tile list takes extraShared more bytes of shared
// memory) for weights of type t.
func (k *Kernels) checkF32Tile(name string, tile Tile, t quant.Type, extraShared int) error {
	if tile.KB != 0 && tile.KB != 16 && tile.KB != 32 && tile.KB != 64 {
		return fmt.Errorf("kernels: %s: tile %v: activation chunk %d, want 16, 32 or 64", name, tile, tile.KB)
	}
	return k.checkTile(tile, t, tile.SharedBytes(t)+extraShared)
}

// checkQ8Tile is checkF32Tile for matmul_q8 and its gathered variant, which
// also read the weights w and activations xq in 16-byte words.
func (k *Kernels) checkQ8Tile(name string, tile Tile, t quant.Type, w, xq vk.Binding, extraShared int) error {
	if tile.KB != 0 && tile.KB != 32 && tile.KB != 64 {
		return fmt.Errorf("kernels: %s: tile %v: activation chunk %d, want 32 or 64", name, tile, tile.KB)
	}
	if err := k.checkTile(tile, t, tile.Q8SharedBytes(t)+extraShared); err != nil {
		return err
	}
	if w.Off%16 != 0 || xq.Off%16 != 0 {
		return fmt.Errorf("kernels: %s: weights at offset %d, activations at %d: need multiples of 16", name, w.Off, xq.Off)
	}
	return nil
}

// checkTile reports whether tile can run on this device for weights of type t.
func (k *Kernels) checkTile(tile Tile, t quant.Type, shared int) error {
	if tile.BM < 1 || tile.BN < 1 || tile.TM < 1 || tile.TN < 1 || tile.BM%tile.TM != 0 || tile.BN%tile.TN != 0 {
		return fmt.Errorf("kernels: matmul: tile %v: micro-tiles must divide the tile", tile)
	}
	if n := tile.Invocations(); n > k.info.MaxWorkgroupInvocations {
		return fmt.Errorf("kernels: matmul: tile %v needs %d invocations, device allows %d", tile, n, k.info.MaxWorkgroupInvocations)
	}
	if shared > k.info.SharedMemory {
		return fmt.Errorf("kernels: matmul: tile %v needs %d bytes of shared memory for %s, device has %d", tile, shared, t, k.info.SharedMemory)
	}
	return nil
}

// b32 is a boolean specialization constant.
func b32(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}
