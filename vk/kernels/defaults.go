package kernels

import (
	"github.com/vkinfer/vkinfer/coopmat"
	"github.com/vkinfer/vkinfer/quant"
)

// The built-in shapes, used where no tuning profile matches the device.
// They are the winners of `infer tune` on an NVIDIA H200 for the
// Llama-3-8B shapes (docs/TUNING.md): for the matrix-vector kernel, 128
// lanes over 4 rows took 25 µs on the 14336x4096 Q4_K FFN matrices where
// the previous 64x2x2 default took 225 µs; for prefill, the 64x64 tile
// with 4x4 micro-tiles and f16 weights ran 3.0-5.9x the 16x16 reference
// and 1.4-1.7x the previous 32x32 default. No other vendor has been
// measured yet, so every device starts from these, with the largest tile
// its shared memory and workgroup size allow.
var (
	defaultMatVec = MatVecShape{Lanes: 128, Rows: 4, Unroll: 1}
	// defaultMatVecQ8 sizes its workgroups by the matrix (MatVecQ8For):
	// on the H200, 14336 rows of 4096 Q4_K values ran 15-18% faster on 32
	// lanes (one NVIDIA subgroup, so the reduction needs no shared-memory
	// stage) than on 128, while 4096 rows of 14336 ran 14% slower on 32,
	// and 1024 rows of 4096 Q6_K took 15.4 µs on 32 lanes against 9.0 on
	// 128: too few lanes in all to keep the memory busy. Two rows per
	// workgroup won `infer tune --kernels matvec_q8` there (18-32% faster
	// than 4 on the q/o and k/v matrices), and tg128 went from 277 to 289
	// tokens/s.
	defaultMatVecQ8 = MatVecShape{Rows: 2, Unroll: 1}
	// gatedRows is the fewest rows a gated product's workgroup takes (half
	// of gate, half of up: MatVecStack with Gated over one column,
	// MatVecIDGLU), whatever the plain products' shape. Its 8-bit copy's
	// 32-value block is counted done by 32/(rows/2) workgroups; at 2 rows
	// that was 32 device-scope atomics on one counter and 14336 workgroups
	// for Llama-3-8B's gate and up. On an H100 8 rows took Llama-3-8B tg128 from 273–277 to 283–285
	// tokens/s and Qwen3-30B-A3B's from 231–236 to 238–244 (16 rows lost:
	// 259–260 and 228–229; docs/BENCHMARKS.md). RADV builds the 8-row
	// pipelines in the registers of the 2-row ones (docs/AMD.md).
	gatedRows = 8
	// idGatedRows is the rows of a mixture of experts' gate and up
	// product's workgroup with 8-bit activations (MatVecIDGLU), half of
	// each. The topK experts' rows run in one dispatch, so workgroups of
	// few rows and lanes still number thousands, and each lane's chain of
	// slices stays short (BenchmarkMoEDecode; docs/KERNELS.md).
	idGatedRows = 4
	// defaultTiles in order of preference.
	defaultTiles = []Tile{
		{BM: 64, BN: 64, TM: 4, TN: 4, F16: true},
		{BM: 32, BN: 32, TM: 4, TN: 4, F16: true},
	}
)

// Defaults returns the matrix-vector shape and the prefill tiles (f32 and
// 8-bit activations) for a device with sharedMemory bytes of workgroup
// memory and at most invocations per workgroup: of each list the first
// preferred tile that fits every weight type (K-quants need the most),
// else the smallest.
func Defaults(sharedMemory, invocations int) (MatVecShape, Tile, Tile) {
	mv := defaultMatVec
	mv.Lanes = min(mv.Lanes, invocations)
	pick := func(tiles []Tile, bytes func(Tile) int) Tile {
		for _, t := range tiles {
			if bytes(t) <= sharedMemory && t.Invocations() <= invocations {
				return t
			}
		}
		return tiles[len(tiles)-1]
	}
	return mv, pick(defaultTiles, func(t Tile) int { return t.SharedBytes(quant.Q4_K) }),
		pick(defaultQ8Tiles, func(t Tile) int { return t.Q8SharedBytes(quant.Q4_K) })
}

// defaultQ8Tiles are matmul_q8's tiles in order of preference (KB is the
// activation chunk, 0 meaning 64). On the H200 (BenchmarkMatMulQ4K, 512
// columns of the Llama-3-8B FFN matrices) 32x256/8x4 ran 38-41 TFLOP/s,
// 32x256/4x8 35-37, 64x128/4x8 30-33, 32x128/4x8 27-29 and 64x64/4x4
// 19-21, against 23-24 for the f32 kernel's default tile. Wide tiles win:
// each weight byte staged in shared memory meets 256 columns. The second
// fits 32 KiB.
var defaultQ8Tiles = []Tile{
	{BM: 32, BN: 256, TM: 8, TN: 4},
	{BM: 32, BN: 128, TM: 4, TN: 8},
	{BM: 32, BN: 32, TM: 4, TN: 4},
}

// narrowQ8Tiles are matmul_q8's tiles for short batches (TileQ8For), each
// for up to cols columns, narrowest first. On the H200 (the Llama-3-8B FFN
// matrices, µs for the pair of products, BenchmarkMatMulQ4K -sweep -cols)
// the 32×256 default took 1560 at 16 columns against 507 for 32×32, 1470 at
// 64 against 664 for 16×64, and 1546 at 128 against 1171 for 32×64: pp16
// to pp128 each cost what pp256 did.
var narrowQ8Tiles = []struct {
	cols int
	tile Tile
}{
	{32, Tile{BM: 32, BN: 32, TM: 4, TN: 4}},
	{64, Tile{BM: 16, BN: 64, TM: 2, TN: 8}},
	{128, Tile{BM: 32, BN: 64, TM: 4, TN: 8}},
}

// Q8Tiles are the matmul_q8 tiles that BenchmarkMatMulQ4K -sweep tries and
// TestMatMulQ8 checks beyond the defaults (infer tune sweeps a few of them,
// tune's q8Tiles).
var Q8Tiles = []Tile{
	{BM: 64, BN: 64, TM: 4, TN: 4},
	{BM: 64, BN: 128, TM: 4, TN: 8},
	{BM: 64, BN: 128, TM: 8, TN: 4},
	{BM: 32, BN: 256, TM: 4, TN: 8, KB: 32},
	{BM: 32, BN: 256, TM: 8, TN: 4},
	{BM: 32, BN: 256, TM: 8, TN: 8},
	{BM: 32, BN: 256, TM: 4, TN: 16},
	{BM: 16, BN: 256, TM: 2, TN: 8},
	{BM: 32, BN: 64, TM: 4, TN: 8},
	{BM: 16, BN: 64, TM: 2, TN: 8},
}

// WideTiles are the large-micro-tile candidates a tuning sweep tries beyond
// the plain ones (tune's defaultTiles) and TestMatMul checks: they fit 48
// KiB (NVIDIA, Intel) with K-quant weights; few fit 32 KiB. The more values
// an invocation's micro-tile holds, the fewer shared-memory bytes and f16
// conversions each FMA costs (a TM x TN micro-tile reads TM + TN values per
// k for TM*TN FMAs); f16 activations (X16) or chunks of 16 values of k (KB)
// make room for wider tiles, f32 weight tiles (BM 32) need no weight
// conversions. A 64-row f16 weight tile of K-quants is 33 KiB, so BM stops
// at 80 (a 128-row one, 66 KiB, fits no device we know).
var WideTiles = []Tile{
	{BM: 64, BN: 64, TM: 4, TN: 4, F16: true, X16: true},
	{BM: 64, BN: 64, TM: 4, TN: 4, F16: true, X16: true, KB: 64},
	{BM: 64, BN: 64, TM: 8, TN: 8, F16: true},
	{BM: 64, BN: 64, TM: 8, TN: 8, F16: true, X16: true},
	{BM: 64, BN: 64, TM: 4, TN: 8, F16: true},
	{BM: 64, BN: 64, TM: 8, TN: 4, F16: true},
	{BM: 64, BN: 128, TM: 4, TN: 8, F16: true, X16: true},
	{BM: 64, BN: 128, TM: 4, TN: 8, F16: true, KB: 16},
	{BM: 64, BN: 128, TM: 8, TN: 8, F16: true, X16: true},
	{BM: 64, BN: 128, TM: 8, TN: 8, F16: true, KB: 16},
	{BM: 64, BN: 128, TM: 8, TN: 4, F16: true, X16: true},
	{BM: 64, BN: 256, TM: 8, TN: 16, F16: true, X16: true, KB: 16},
	{BM: 64, BN: 256, TM: 8, TN: 8, F16: true, X16: true, KB: 16},
	{BM: 80, BN: 128, TM: 10, TN: 8, F16: true, X16: true, KB: 16},
	{BM: 32, BN: 64, TM: 4, TN: 8},
	{BM: 32, BN: 128, TM: 4, TN: 8, X16: true},
	{BM: 32, BN: 128, TM: 4, TN: 8, KB: 16},
	{BM: 32, BN: 256, TM: 4, TN: 16, X16: true, KB: 16},
	{BM: 32, BN: 128, TM: 4, TN: 8, F16: true, X16: true},
	{BM: 32, BN: 256, TM: 4, TN: 16, F16: true, X16: true},
}

// DefaultQ8 is the built-in choice of 8-bit activations for decode's
// matrix-vector products: where the device runs the packed 4x8-bit dot
// product natively (NVIDIA since Turing, AMD since RDNA2, Intel Xe), one
// instruction does four products and the activations shrink fourfold, as
// in llama.cpp's integer-dot path. Where it is emulated (RDNA1, GCN,
// lavapipe) nothing pays for rounding the activations, so the f32 kernel
// stays.
func DefaultQ8(integerDot, accelerated bool) bool { return integerDot && accelerated }

// DefaultNarrowCoop says whether products of MaxMatVecCols < n <=
// NarrowCoopCols columns run on matvec_coopmat (Kernels.NarrowCoop) by
// default on a device of this vendor, where cooperative matrices are on.
// Measured on an H100 only: with its activations in blocks of 16 it beat
// matvec_q8 from 24 columns on every Llama-3-8B matrix and matmul_coopmat
// up to 64 but for ties, and took 16, 32 and 64 streams from 921-938,
// 1015-1034 and 1540-1580 to 958-977, 1311-1353 and 1729-1765 decoded
// tokens/s (docs/BENCHMARKS.md). RDNA3, the other device family with
// matrix units, builds it (docs/AMD.md) but is unmeasured: off there.
func DefaultNarrowCoop(vendor uint32) bool { return vendor == coopmat.VendorNVIDIA }
