package kernels

import (
	"fmt"

	"github.com/vkinfer/vkinfer/quant"
	"github.com/vkinfer/vkinfer/vk"
)

// The integer variant of the cooperative-matrix product
// (matmul_coopmat_i8.comp): 8-bit activations in the q8 layout (QuantizeQ8)
// times the weights' integer quants, as int8 x int8 -> int32 fragments,
// each run of values that shares a weight scale summed exactly and scaled
// into f32 accumulators (docs/KERNELS.md).

// HasCoopInt8 says whether the integer variant takes weights of type t:
// the formats whose quants slices.glsl keeps as bytes (HasQ8's).
func HasCoopInt8(t quant.Type) bool { return HasQ8(t) }

// UseCoopInt8 says whether a product of n activation columns of K values
// with weights of type t runs on the integer variant: k.CoopInt8 asks for
// it, and the cooperative-matrix products take the product (UseCoop) and
// the variant its weights; not the narrow batches that NarrowCoop sends
// to matvec_coopmat.
func (k *Kernels) UseCoopInt8(t quant.Type, n, K int) bool {
	return k.CoopInt8Takes(n, K) && k.UseCoop(t, n, K) && HasCoopInt8(t)
}

// CoopInt8Takes says whether products of n activation columns of K
// values with weights the variant takes run on it, reading an 8-bit copy
// of the activations.
func (k *Kernels) CoopInt8Takes(n, K int) bool {
	return k.CoopInt8 && k.CoopTakes(n, K) && !k.narrowCoop(n)
}

// coopInt8Shape is the integer fragment shape: the policy's
// (k.CoopMat.Int8), else 16x16x16 (the emulation's default).
func (k *Kernels) coopInt8Shape() (m, n, kk int) {
	if s := k.CoopMat.Int8; s.M != 0 {
		return s.M, s.N, s.K
	}
	return 16, 16, 16
}

// coopInt8Run is how many values share one weight scale in the integer
// variant: 16 for Q6_K, 32 (a block of activations) for the others.
func coopInt8Run(t quant.Type) int {
	if t == quant.Q6_K {
		return 16
	}
	return 32
}

// kSpanInt8 is kSpan for the integer variant, which stages dequant.glsl's
// pieces as they are (slices.glsl): a Q6_K piece spans a 128-value half
// of its block.
func kSpanInt8(t quant.Type) int {
	if t == quant.Q6_K {
		return 128
	}
	return kSpan(t)
}

// Int8SharedBytes is the shared memory of the tile in the integer variant
// with weights of type t and fragments of m x n x kk: the byte stages
// (weights EXP bytes a value, EXP = 2 where kk is twice the weights' run
// of one scale), their scales, the weight mins and activation sums of
// Q4_K/Q5_K (a 16-byte placeholder each for the others), and one f32
// fragment per subgroup for the output (matmul_coopmat_i8.glsl).
func (t CoopTile) Int8SharedBytes(qt quant.Type, m, n, kk int) int {
	run := coopInt8Run(qt)
	exp := max(1, kk/run)
	b := t.BM*(exp*t.BK+16) + t.BN*(t.KC+16) + 4*t.BM*t.BK/run + 4*t.BN*t.KC/32 + 4*t.Subgroups()*m*n
	if qt == quant.Q4_K || qt == quant.Q5_K {
		return b + 4*t.BM*t.BK/32 + 4*t.BN*t.KC/32
	}
	return b + 2*16
}

// defaultCoopInt8Tiles in order of preference (CoopInt8TileForShape), by
// estimate, unmeasured: the f16 variant's shapes, with subgroup parts of
// 64x32 at most (a part holds its accumulators, its int32 product and the
// scale fragments of its rows and columns, each a whole fragment) and
// Q6_K's steps of 128 values in tiles whose bytes fit (twice the bytes a
// value where the fragments' K is 32).
var defaultCoopInt8Tiles = []CoopTile{
	{BM: 128, BN: 256, WM: 64, WN: 32, BK: 64, KC: 32},
	{BM: 128, BN: 128, WM: 64, WN: 32, BK: 64, KC: 64},
	{BM: 128, BN: 128, WM: 64, WN: 32, BK: 128, KC: 32},
	{BM: 64, BN: 128, WM: 32, WN: 64, BK: 128, KC: 32},
	{BM: 64, BN: 64, WM: 32, WN: 32, BK: 64, KC: 64},
	{BM: 64, BN: 64, WM: 32, WN: 32, BK: 128, KC: 64},
	{BM: 32, BN: 64, WM: 32, WN: 32, BK: 128, KC: 32},
	{BM: 16, BN: 32, WM: 16, WN: 16, BK: 128, KC: 32},
}

// CoopInt8Tiles are the tiles BenchmarkMatMulCoop -sweep tries for the
// integer variant beyond the built-in one.
var CoopInt8Tiles = []CoopTile{
	{BM: 128, BN: 256, WM: 64, WN: 32, BK: 64, KC: 32},
	{BM: 128, BN: 256, WM: 64, WN: 64, BK: 64, KC: 32},
	{BM: 128, BN: 128, WM: 64, WN: 32, BK: 64, KC: 64},
	{BM: 128, BN: 128, WM: 32, WN: 64, BK: 64, KC: 64},
	{BM: 128, BN: 128, WM: 64, WN: 64, BK: 64, KC: 64},
	{BM: 128, BN: 128, WM: 64, WN: 32, BK: 128, KC: 32},
	{BM: 128, BN: 128, WM: 64, WN: 32, BK: 128, KC: 64},
	{BM: 64, BN: 256, WM: 32, WN: 64, BK: 128, KC: 32},
	{BM: 64, BN: 128, WM: 32, WN: 64, BK: 128, KC: 32},
	{BM: 64, BN: 128, WM: 32, WN: 32, BK: 64, KC: 64},
	{BM: 64, BN: 64, WM: 32, WN: 32, BK: 64, KC: 64},
}

// CoopInt8TileForShape is the integer variant's tile for a rows x K
// matrix of type t and n activation columns: the first built-in tile that
// takes the type, fits, and leaves the matrix at least half as many
// workgroups as the device has compute units (as CoopTileForShape), else
// the first that takes it.
func (k *Kernels) CoopInt8TileForShape(t quant.Type, rows, n int) CoopTile {
	cus := k.info.ComputeUnits
	if cus == 0 {
		cus = 32
	}
	m, nn, _ := k.coopInt8Shape()
	var first *CoopTile
	for i, tile := range defaultCoopInt8Tiles {
		// The emulation holds whole fragments per invocation (CoopTileFor).
		if k.CoopEmulated && (tile.WM/m)*(tile.WN/nn) > 4 {
			continue
		}
		if k.CheckCoopInt8Tile(tile, t) != nil {
			continue
		}
		if 2*ceil(rows, tile.BM)*ceil(n, tile.BN) >= cus {
			return tile
		}
		if first == nil {
			first = &defaultCoopInt8Tiles[i]
		}
	}
	if first != nil {
		return *first
	}
	return defaultCoopInt8Tiles[len(defaultCoopInt8Tiles)-1]
}

// CheckCoopInt8Tile reports whether tile can run the integer variant on
// this device with weights of type t.
func (k *Kernels) CheckCoopInt8Tile(tile CoopTile, t quant.Type) error {
	m, n, kk := k.coopInt8Shape()
	bad := func(why string) error { return fmt.Errorf("kernels: matmul_coopmat_i8: tile %v: %s", tile, why) }
	switch {
	case !HasCoopInt8(t):
		return fmt.Errorf("kernels: matmul_coopmat_i8: weights of type %s: %w", t, quant.ErrUnsupported)
	case kk != 16 && kk != 32:
		return bad(fmt.Sprintf("fragments of K = %d: the variant runs K of 16 or 32", kk))
	case tile.BM < 1 || tile.BN < 1 || tile.WM < 1 || tile.WN < 1 || tile.BK < 1 || tile.KC < 1:
		return bad("sizes must be positive")
	case tile.BM%tile.WM != 0 || tile.BN%tile.WN != 0:
		return bad("subgroup parts must divide the tile")
	case tile.WM%m != 0 || tile.WN%n != 0 || tile.WM%16 != 0 || tile.WN%16 != 0:
		return bad(fmt.Sprintf("subgroup parts must be whole %dx%d fragments and multiples of 16", m, n))
	case tile.BK%kSpanInt8(t) != 0:
		return bad(fmt.Sprintf("K step must hold whole runs of %d %s values", kSpanInt8(t), t))
	case tile.BK%tile.KC != 0 || tile.KC%32 != 0:
		return bad("the activation chunk must divide the K step and be whole blocks of 32")
	}
	if inv := tile.Subgroups() * k.coopSubgroup(); inv > k.info.MaxWorkgroupInvocations {
		return bad(fmt.Sprintf("needs %d invocations, device allows %d", inv, k.info.MaxWorkgroupInvocations))
	}
	if b := tile.Int8SharedBytes(t, m, n, kk); b > k.info.SharedMemory {
		return bad(fmt.Sprintf("needs %d bytes of shared memory, device has %d", b, k.info.SharedMemory))
	}
	return nil
}

// MatMulCoopInt8 records dst = W·x on the matrix units' 8-bit products
// for n columns of activations xq in the q8 layout (QuantizeQ8), weights
// of a type where HasCoopInt8 holds, with an explicit tile:
// matmul_coopmat_i8 on the device's int8 fragments (k.CoopMat.Int8), or
// matmul_coopmat_i8_emu where k.CoopEmulated asks for the emulation.
// Unlike MatMulCoop it is exact to f32 rounding: the products of quants
// are integers, and the scales are applied in f32.
func (k *Kernels) MatMulCoopInt8(s *vk.Sequence, dst, w, xq vk.Binding, t quant.Type, n, rows, K int, tile CoopTile) error {
	if !k.coopOn() {
		return fmt.Errorf("kernels: matmul_coopmat_i8: cooperative matrices are off on this device")
	}
	if !k.CoopEmulated && k.CoopMat.Int8.IsZero() {
		return fmt.Errorf("kernels: matmul_coopmat_i8: the device offers no 8-bit cooperative-matrix shape")
	}
	if !k.CoopEmulated && !k.info.Int8 {
		return fmt.Errorf("kernels: matmul_coopmat_i8: the device lacks shaderInt8, which int8 fragments need")
	}
	if err := k.CheckCoopInt8Tile(tile, t); err != nil {
		return err
	}
	rb, err := checkMatrix("matmul_coopmat_i8", dst, w, xq, Q8Bytes(n, K), t, n, rows, K)
	if err != nil {
		return err
	}
	if w.Off%16 != 0 || xq.Off%16 != 0 {
		return fmt.Errorf("kernels: matmul_coopmat_i8: weights at offset %d, activations at %d: need multiples of 16", w.Off, xq.Off)
	}
	return k.dispatchTiles(s, "matmul_coopmat_i8", k.MatMulCoopInt8Spec(t, tile), dst, w, xq, t, n, rows, K, rb, tile.BM, tile.BN)
}

// MatMulCoopInt8Spec is the pipeline MatMulCoopInt8 builds for weights of
// type t.
func (k *Kernels) MatMulCoopInt8Spec(t quant.Type, tile CoopTile) vk.PipelineSpec {
	m, n, kk := k.coopInt8Shape()
	sg := k.coopSubgroup()
	name, wave := "matmul_coopmat_i8", sg
	if k.CoopEmulated {
		name, wave = "matmul_coopmat_i8_emu", 0
	}
	return spec(name, 3, 16, wave, uint32(tile.Subgroups()*sg), uint32(t),
		uint32(tile.BM), uint32(tile.BN), uint32(tile.WM), uint32(tile.WN), uint32(tile.BK), uint32(tile.KC),
		uint32(m), uint32(n), uint32(kk), uint32(sg))
}
