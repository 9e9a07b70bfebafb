package kernels

import (
	"fmt"

	"github.com/vkinfer/vkinfer/quant"
	"github.com/vkinfer/vkinfer/vk"
)

// The gathered products of a mixture-of-experts prefill (matmul_cols.glsl,
// docs/KERNELS.md): MoESort sorts the batch's (token, slot) pairs by expert
// and cuts each expert's run into tiles of Height pairs; the tiled products
// built with MOE_ID multiply each tile's expert by the activation rows of
// its pairs, gathered, and write each pair's result to its own row, the
// layout MatVecID writes. An expert's weights are read once per tile, not
// once per token that chose it.

// Sorted is a prefill batch's pairs sorted by expert and cut into tiles on
// the device: MoESort's output, which the gathered products read.
type Sorted struct {
	B       vk.Binding // MoESort's dst
	Pairs   int        // tokens · TopK
	TopK    int        // slots per token
	Experts int        // experts routed among
	Height  int        // the tiles' most pairs, which must be the product's BN
}

// idShared is the shared memory the gathered variant adds to a tile of bn
// columns: each column's x row and dst row (matmul_cols.glsl).
func idShared(bn int) int { return 8 * bn }

// moeCoopTiles are the cooperative-matrix tiles of the gathered product in
// order of preference (MoECoopTile). A 512-token batch of Qwen3-30B-A3B
// gives each of its 128 experts about 32 of the 4096 pairs: 64 columns
// hold most experts' pairs in one tile, so each expert's weights are
// decoded once, and the subgroups skip the fragments past a tile's pairs
// (matmul_coopmat.glsl), so the matrix units compute each expert's pairs
// rounded up to a fragment's width, not to 64. Measured on the H200
// (BenchmarkMoEPrefill -sweep, docs/KERNELS.md): 64-row tiles beat 128-row
// ones on the 768x2048 and 2048x768 Q4_K experts (425 against 514 µs for
// gate or up): small expert matrices need many workgroups to fill the
// device. Q6_K takes the first tile too, since the stage cuts it into
// 64-value runs (f16stage.glsl). The others stay for devices the first
// does not fit.
var moeCoopTiles = []CoopTile{
	{BM: 64, BN: 64, WM: 32, WN: 32, BK: 64, KC: 64},
	{BM: 32, BN: 32, WM: 16, WN: 16, BK: 128, KC: 32},
	{BM: 128, BN: 64, WM: 64, WN: 32, BK: 64, KC: 64},
	{BM: 128, BN: 64, WM: 64, WN: 32, BK: 128, KC: 32},
	{BM: 64, BN: 64, WM: 32, WN: 32, BK: 128, KC: 32},
}

// MoECoopTile is the tile of the gathered cooperative-matrix product for
// weights of type t: the first of moeCoopTiles this device takes, with the
// limits of the emulation where it runs (as coopTile).
func (k *Kernels) MoECoopTile(t quant.Type) CoopTile {
	m, n, _ := k.coopShape()
	for _, tile := range moeCoopTiles {
		if k.CoopEmulated && (tile.WM/m)*(tile.WN/n) > 4 {
			continue
		}
		if k.checkCoopTileID(tile, t) == nil {
			return tile
		}
	}
	return moeCoopTiles[len(moeCoopTiles)-1]
}

// MoETileQ8 is the tile of the gathered 8-bit product for a batch of pairs
// over experts: TileQ8For the pairs an expert gets on average, the width
// of its product.
func (k *Kernels) MoETileQ8(pairs, experts int) Tile {
	return k.TileQ8For(ceil(pairs, max(experts, 1)))
}

// checkCoopTileID is CheckCoopTile with the shared memory of the gathered
// variant.
func (k *Kernels) checkCoopTileID(tile CoopTile, t quant.Type) error {
	if err := k.CheckCoopTile(tile, t); err != nil {
		return err
	}
	m, n, _ := k.coopShape()
	if b := tile.SharedBytes(m, n) + idShared(tile.BN); b > k.info.SharedMemory {
		return fmt.Errorf("kernels: matmul_coopmat_id: tile %v needs %d bytes of shared memory, device has %d", tile, b, k.info.SharedMemory)
	}
	return nil
}

// checkID validates a gathered product's operands: dst of a row of rows
// values per pair, weights of s.Experts matrices of rows x K of type t, x
// of xRows rows (one per token or one per pair) in xSize bytes, and s cut
// for tiles of bn columns. It returns the weights' row size and the pairs
// per row of x.
func checkID(name string, dst, w, x vk.Binding, xSize int64, s Sorted, t quant.Type, xRows, rows, K, bn int) (rb, xdiv int, err error) {
	if err := positive(name, s.Pairs, s.TopK, s.Experts, s.Height); err != nil {
		return 0, 0, err
	}
	if s.Height != bn {
		return 0, 0, fmt.Errorf("kernels: %s: tiles of %d pairs sorted for a product of %d columns", name, s.Height, bn)
	}
	if s.Experts > MaxExperts {
		return 0, 0, fmt.Errorf("kernels: %s: %d experts (at most %d)", name, s.Experts, MaxExperts)
	}
	xdiv = 1
	if xRows != s.Pairs {
		if s.Pairs%s.TopK != 0 || xRows != s.Pairs/s.TopK {
			return 0, 0, fmt.Errorf("kernels: %s: %d x rows for %d pairs of %d per token", name, xRows, s.Pairs, s.TopK)
		}
		xdiv = s.TopK
	}
	if rb, err = weightRow(name, t, s.Experts*rows, K); err != nil {
		return 0, 0, err
	}
	if err := positive(name, s.Pairs, rows); err != nil { // dst indices
		return 0, 0, err
	}
	if err := positive(name, xRows, K); err != nil { // x indices
		return 0, 0, err
	}
	if err := need(name+" dst", dst, f32(s.Pairs*rows)); err != nil {
		return 0, 0, err
	}
	if err := need(name+" weights", w, round4(int64(s.Experts)*int64(rows)*int64(rb))); err != nil {
		return 0, 0, err
	}
	if err := need(name+" x", x, xSize); err != nil {
		return 0, 0, err
	}
	if err := need(name+" sorted pairs", s.B, f32(MoESortWords(s.Pairs, s.Experts, s.Height))); err != nil {
		return 0, 0, err
	}
	return rb, xdiv, nil
}

// dispatchID records a gathered product: one workgroup per bm weight rows
// of each of the most tiles the batch can make (those past MoESort's count
// return at once).
func (k *Kernels) dispatchID(seq *vk.Sequence, ps vk.PipelineSpec, dst, w, x vk.Binding, s Sorted, t quant.Type, xRows, rows, K, rb, xdiv, bm int) error {
	gx, gy := ceil(rows, bm), MoETiles(s.Pairs, s.Experts, s.Height)
	if gx > int(k.info.MaxWorkgroupCount[0]) || gy > int(k.info.MaxWorkgroupCount[1]) {
		return fmt.Errorf("kernels: %s: %dx%d tiles exceed the device's workgroup grid", ps.Name, gx, gy)
	}
	p, err := k.pipeline(ps)
	if err != nil {
		return err
	}
	seq.Label(fmt.Sprintf("%d experts of %dx%d %s, %d pairs", s.Experts, rows, K, t, s.Pairs))
	seq.Dispatch(p, []vk.Binding{dst, w, x, s.B},
		vk.Push(uint32(rows), uint32(xRows), uint32(K), uint32(rb), uint32(s.Experts), uint32(s.Pairs), uint32(xdiv)),
		uint32(gx), uint32(gy), 1)
	return nil
}

// idSpec is the gathered variant of a tiled product's pipeline: the same
// specialization, the shader built with MOE_ID (NAME_id), the sorted pairs
// as a fourth binding and three more push constants.
func idSpec(ps vk.PipelineSpec) vk.PipelineSpec {
	return spec(ps.Name+"_id", 4, 28, ps.SubgroupSize, ps.Spec...)
}

// MatMulTiledID records matmul_id, the gathered product on the f32 tiled
// kernel: for each pair p of s, dst row p = W_e · x_p, e the pair's expert
// and x_p x's row p/TopK (x of a row per token) or p (a row per pair), w
// holding s.Experts matrices of rows x K of type t (expert e's row r at row
// e·rows + r). s must be cut for tiles of tile.BN pairs.
func (k *Kernels) MatMulTiledID(seq *vk.Sequence, dst, w, x vk.Binding, s Sorted, t quant.Type, xRows, rows, K int, tile Tile) error {
	const name = "matmul_id"
	rb, xdiv, err := checkID(name, dst, w, x, f32(xRows*K), s, t, xRows, rows, K, tile.BN)
	if err != nil {
		return err
	}
	if err := k.checkF32Tile(name, tile, t, idShared(tile.BN)); err != nil {
		return err
	}
	return k.dispatchID(seq, k.MatMulIDSpec(t, tile), dst, w, x, s, t, xRows, rows, K, rb, xdiv, tile.BM)
}

// MatMulIDSpec is the pipeline MatMulTiledID builds.
func (k *Kernels) MatMulIDSpec(t quant.Type, tile Tile) vk.PipelineSpec {
	return idSpec(k.MatMulSpec(t, tile))
}

// MatMulQ8ID records matmul_q8_id, MatMulTiledID on 8-bit activations xq
// (QuantizeQ8's layout, xRows rows) with integer dot products, for weight
// types where HasQ8 holds.
func (k *Kernels) MatMulQ8ID(seq *vk.Sequence, dst, w, xq vk.Binding, s Sorted, t quant.Type, xRows, rows, K int, tile Tile) error {
	const name = "matmul_q8_id"
	if err := k.q8Ready(name, t); err != nil {
		return err
	}
	if K%32 != 0 {
		return fmt.Errorf("kernels: %s: rows of %d values: need a multiple of 32", name, K)
	}
	rb, xdiv, err := checkID(name, dst, w, xq, Q8Bytes(xRows, K), s, t, xRows, rows, K, tile.BN)
	if err != nil {
		return err
	}
	if err := k.checkQ8Tile(name, tile, t, w, xq, idShared(tile.BN)); err != nil {
		return err
	}
	return k.dispatchID(seq, k.MatMulQ8IDSpec(t, tile), dst, w, xq, s, t, xRows, rows, K, rb, xdiv, tile.BM)
}

// MatMulQ8IDSpec is the pipeline MatMulQ8ID builds.
func (k *Kernels) MatMulQ8IDSpec(t quant.Type, tile Tile) vk.PipelineSpec {
	return idSpec(k.MatMulQ8Spec(t, tile))
}

// MatMulCoopID records matmul_coopmat_id (or its emulation, as
// MatMulCoop), MatMulTiledID on the matrix units for activations xh in
// QuantizeF16's layout (xRows rows), weights of a type where HasCoop holds.
func (k *Kernels) MatMulCoopID(seq *vk.Sequence, dst, w, xh vk.Binding, s Sorted, t quant.Type, xRows, rows, K int, tile CoopTile) error {
	const name = "matmul_coopmat_id"
	if err := k.coopReady(name, t); err != nil {
		return err
	}
	if K%8 != 0 {
		return fmt.Errorf("kernels: %s: rows of %d values: need a multiple of 8", name, K)
	}
	rb, xdiv, err := checkID(name, dst, w, xh, F16Bytes(xRows, K), s, t, xRows, rows, K, tile.BN)
	if err != nil {
		return err
	}
	if err := k.checkCoopTileID(tile, t); err != nil {
		return err
	}
	if err := coopAligned(name, t, w, xh); err != nil {
		return err
	}
	return k.dispatchID(seq, k.MatMulCoopIDSpec(t, tile), dst, w, xh, s, t, xRows, rows, K, rb, xdiv, tile.BM)
}

// MatMulCoopIDSpec is the pipeline MatMulCoopID builds.
func (k *Kernels) MatMulCoopIDSpec(t quant.Type, tile CoopTile) vk.PipelineSpec {
	return idSpec(k.MatMulCoopSpec(t, tile))
}
