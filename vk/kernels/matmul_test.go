package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/vkinfer/vkinfer/quant"
	"github.com/vkinfer/vkinfer/vk"
)

// kFor returns K values for weights of type t that are whole blocks and
// awkward: odd block counts (so Q6_K/Q8_0/Q4_0 rows and blocks sit on 2-byte
// boundaries), one block, and the 14336 of Llama-3-8B's FFN; float rows that
// end inside a 16-value piece.
func kFor(t quant.Type) []int {
	switch {
	case isFloat(t):
		return []int{4, 100, 4100, 14336, 516}
	case t.BlockSize() == 32:
		return []int{32, 96, 4128, 14336, 544}
	}
	return []int{256, 768, 4096, 14336, 512}
}

// matRef returns x[n][K] . W^T and, per result, sum |w*x| (the magnitude
// f32 rounding errors scale with), in float64.
func matRef(deq, x []float32, n, rows, K int) (want, scale []float64) {
	want, scale = make([]float64, n*rows), make([]float64, n*rows)
	for c := 0; c < n; c++ {
		xc := x[c*K : (c+1)*K]
		for r := 0; r < rows; r++ {
			var s, a float64
			for k, w := range deq[r*K : (r+1)*K] {
				p := float64(w) * float64(xc[k])
				s += p
				a += math.Abs(p)
			}
			want[c*rows+r], scale[c*rows+r] = s, a
		}
	}
	return want, scale
}

// dotTol is the error allowed in an f32 dot product of K terms, relative to
// sum |w*x|: the partial sums of random-signed terms grow like sqrt(K), and
// 8 sqrt(K) unit roundoffs leave room for the summation order of the lanes.
func dotTol(K int) float64 { return 8 * math.Sqrt(float64(K)) * eps32 }

type matCase struct {
	rows, K, n int
}

// testMatrix uploads random weights of type qt and activations, records rec
// and compares dst with the float64 product. The weights sit 256 bytes into
// their buffer and dst 64 bytes into its, so binding offsets are exercised.
func testMatrix(t *testing.T, k *Kernels, qt quant.Type, c matCase, tol float64,
	rec func(s *vk.Sequence, dst, w, x vk.Binding) error) {
	t.Helper()
	r := rand.New(rand.NewPCG(uint64(c.rows), uint64(c.K*10+c.n)))
	raw, deq := quantized(t, r, qt, c.rows, c.K)
	x := normals(r, c.n*c.K, 1)
	const dOff = 64
	w := weightsAt(t, raw, 256)
	xb := floatBuffer(t, x)
	db := buffer(t, dOff+f32(c.n*c.rows), nil)
	run(t, func(s *vk.Sequence) error {
		return rec(s, vk.Binding{Buf: db, Off: dOff, Size: f32(c.n * c.rows)}, w, whole(xb))
	})
	want, scale := matRef(deq, x, c.n, c.rows, c.K)
	compare(t, "dst", read(t, db, dOff, c.n*c.rows), want, scale, tol)
}

// matVecCols are the column counts the matrix-vector tests cycle through:
// every count of one group, and more than one group (a batch of
// sequences decoding together) with a last group as full as the others
// (9, 23: groups of 5 and 8) or not (13: 7 and 6; 17: 6, 6, 5).
var matVecCols = []int{1, 9, 2, 8, 3, 13, 4, 17, 5, 6, 23, 7, 32}

func TestMatVec(t *testing.T) {
	k := setup(t)
	rows := []int{1, 7, 255, 257, 1025}
	// Lanes 16 and wider reduce through shared memory on lavapipe
	// (subgroups of 8); the grid case below runs 8 lanes, one lavapipe
	// subgroup and part of one elsewhere (pure subgroupAdd). Unroll 3, and
	// 8 for Q8_0/Q4_0 and floats, leave a ragged last step. The last shape
	// requires the device's narrowest subgroup size where it can.
	// (Lanes 8 with Unroll 4 here made the Khronos validation layer
	// 1.3.239 crash now and then inside vkCreateComputePipelines.)
	wave := 0
	if k.info.SizeControl {
		wave = k.info.MinSubgroupSize
	}
	shapes := []MatVecShape{{64, 2, 1, 0}, {16, 1, 4, 0}, {32, 3, 2, 0}, {64, 4, 8, 0}, {max(32, wave), 2, 3, wave}}
	i := 0
	for _, qt := range WeightTypes {
		for j, K := range kFor(qt) {
			c := matCase{rows: rows[(j+3)%len(rows)], K: K, n: matVecCols[i%len(matVecCols)]}
			sh := shapes[i%len(shapes)]
			i++
			t.Run(fmt.Sprintf("%s/%dx%d/n%d/%s", qt, c.rows, c.K, c.n, sh), func(t *testing.T) {
				testMatrix(t, k, qt, c, dotTol(c.K), func(s *vk.Sequence, dst, w, x vk.Binding) error {
					return k.MatVecWith(s, dst, w, x, qt, c.n, c.rows, c.K, sh)
				})
			})
		}
	}
	// More workgroups than one grid dimension holds: the grid folds into 2D.
	t.Run("grid", func(t *testing.T) {
		c := matCase{rows: gridX + 3, K: 32, n: 2}
		testMatrix(t, k, quant.Q8_0, c, dotTol(c.K), func(s *vk.Sequence, dst, w, x vk.Binding) error {
			return k.MatVecWith(s, dst, w, x, quant.Q8_0, c.n, c.rows, c.K, MatVecShape{Lanes: 8, Rows: 1, Unroll: 1})
		})
	})
}

// TestMatVecAdd checks the residual form in place (dst is r), as the engine
// uses it for the output and down projections.
func TestMatVecAdd(t *testing.T) {
	k := setup(t)
	for _, c := range []struct {
		qt quant.Type
		matCase
	}{{quant.Q4_K, matCase{rows: 257, K: 512, n: 1}}, {quant.Q6_K, matCase{rows: 7, K: 256, n: 3}}, {quant.F32, matCase{rows: 255, K: 100, n: 8}},
		{quant.Q4_K, matCase{rows: 33, K: 256, n: 13}}} {
		t.Run(fmt.Sprintf("%s/n%d", c.qt, c.n), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(c.rows), uint64(c.K)))
			raw, deq := quantized(t, r, c.qt, c.rows, c.K)
			x, res := normals(r, c.n*c.K, 1), normals(r, c.n*c.rows, 10)
			wb := buffer(t, int64(len(raw)), pad4(raw))
			xb, db := floatBuffer(t, x), floatBuffer(t, res)
			run(t, func(s *vk.Sequence) error {
				return k.MatVecAdd(s, whole(db), whole(wb), whole(xb), whole(db), c.qt, c.n, c.rows, c.K)
			})
			want, scale := matRef(deq, x, c.n, c.rows, c.K)
			for i := range want {
				want[i] += float64(res[i])
				scale[i] += math.Abs(float64(res[i]))
			}
			compare(t, "dst", read(t, db, 0, c.n*c.rows), want, scale, dotTol(c.K))
		})
	}
}

// tiledCases are the awkward products the tiled kernels run for every weight
// type: rows, columns, and K as an index into kFor.
var tiledCases = []matCase{
	{rows: 257, K: 1, n: 100},
	{rows: 7, K: 3, n: 17},
	{rows: 1025, K: 0, n: 9},
	{rows: 255, K: 4, n: 100},
	{rows: 1, K: 2, n: 9},
}

func TestMatMul(t *testing.T) {
	k := setup(t)
	tiles := []Tile{
		{BM: 16, BN: 16, TM: 2, TN: 2},
		{BM: 8, BN: 32, TM: 1, TN: 4},
		{BM: 32, BN: 8, TM: 4, TN: 1},
		{BM: 13, BN: 13, TM: 1, TN: 1},
		{BM: 32, BN: 32, TM: 4, TN: 4, F16: true},
		k.Tile,
	}
	i := 0
	for _, qt := range WeightTypes {
		for _, c := range tiledCases {
			c.K = kFor(qt)[c.K]
			tile := tiles[i%len(tiles)]
			i++
			// Keep the dequantized tile in f32 where it fits; 32-row
			// K-quant tiles only fit 32 KiB as f16.
			if !tile.F16 && tile.SharedBytes(qt) > k.info.SharedMemory {
				tile.F16 = true
			}
			testTile(t, k, qt, c, tile)
		}
	}
	// The wide tiles of the prefill sweep (tune's defaultTiles) and
	// smaller ones with the same options that fit 32 KiB with K-quant
	// weights (64-row f16 weight tiles of K-quants need 33 KiB). Each runs
	// once (lavapipe compiles a big micro-tile for seconds): with a K-quant
	// where it fits, otherwise with the other types in turn, over awkward
	// rows, columns and K whose padded work stays small.
	wideCases := []matCase{
		{rows: 257, K: 1, n: 100}, // K is the index into kFor
		{rows: 7, K: 2, n: 17},
		{rows: 1025, K: 0, n: 7},
		{rows: 255, K: 4, n: 255},
		{rows: 1, K: 1, n: 1025},
	}
	kquants := []quant.Type{quant.Q4_K, quant.Q6_K, quant.Q5_K}
	others := []quant.Type{quant.Q8_0, quant.F32, quant.Q4_0, quant.F16, quant.BF16}
	nk, no := 0, 0
	for i, tile := range wideTestTiles {
		qt := kquants[nk%len(kquants)]
		if tile.SharedBytes(qt) <= k.info.SharedMemory {
			nk++
		} else {
			qt = others[no%len(others)]
			no++
		}
		if tile.SharedBytes(qt) > k.info.SharedMemory {
			t.Errorf("tile %v does not fit %d bytes with %s weights", tile, k.info.SharedMemory, qt)
			continue
		}
		c := wideCases[i%len(wideCases)]
		c.K = kFor(qt)[c.K]
		testTile(t, k, qt, c, tile)
	}
	// MatMul picks the kernel by column count, and f16 tiles for quantized
	// weights only.
	for _, qt := range []quant.Type{quant.Q4_K, quant.F32} {
		for _, n := range []int{MaxMatVecCols, MaxMatVecCols + 1, k.MatVecBatch, k.MatVecBatch + 1} {
			c := matCase{rows: 33, K: 512, n: n}
			tol := dotTol(c.K)
			if !k.MatVecTakes(n) {
				tol = tileTol(c.K, k.TileFor(qt))
			}
			t.Run(fmt.Sprintf("auto/%s/n%d", qt, n), func(t *testing.T) {
				testMatrix(t, k, qt, c, tol, func(s *vk.Sequence, dst, w, x vk.Binding) error {
					return k.MatMul(s, dst, w, x, qt, c.n, c.rows, c.K)
				})
			})
		}
	}
}

// wideTestTiles are the tiles with big micro-tiles, f16 activations or
// other activation chunks that TestMatMul runs: WideTiles, then smaller
// tiles with the same options for K-quant weights on 32 KiB devices.
var wideTestTiles = append(append([]Tile{}, WideTiles...),
	// For K-quants on 32 KiB devices: f16 activations with chunks of 64,
	// an f32 weight tile with f16 activations, a non-power-of-two
	// micro-tile with chunks of 16.
	Tile{BM: 32, BN: 64, TM: 4, TN: 8, F16: true, X16: true, KB: 64},
	Tile{BM: 16, BN: 256, TM: 2, TN: 16, X16: true, KB: 16},
	Tile{BM: 48, BN: 64, TM: 6, TN: 8, F16: true, KB: 16},
)

// testTile runs the tiled kernel on case c against the CPU reference.
func testTile(t *testing.T, k *Kernels, qt quant.Type, c matCase, tile Tile) {
	t.Helper()
	t.Run(fmt.Sprintf("%s/%dx%d/n%d/%v", qt, c.rows, c.K, c.n, tile), func(t *testing.T) {
		testMatrix(t, k, qt, c, tileTol(c.K, tile), func(s *vk.Sequence, dst, w, x vk.Binding) error {
			return k.MatMulTiled(s, dst, w, x, qt, c.n, c.rows, c.K, tile)
		})
	})
}

// tileTol is the error allowed in a K-term dot product of tile, relative
// to sum |w*x|. An f16 weight tile rounds each weight, and an f16
// activation chunk each x, to a relative error of at most 2^-11 (2^-10
// allowed for drivers that truncate): each adds that much of sum |w*x|.
// (An x below 2^-14 rounds to an f16 subnormal with an absolute error up to
// 2^-25, far below this bound unless nearly all x are that small.)
func tileTol(K int, tile Tile) float64 {
	tol := dotTol(K)
	if tile.F16 {
		tol += 1.0 / 1024
	}
	if tile.X16 {
		tol += 1.0 / 1024
	}
	return tol
}

func TestMatMulRejects(t *testing.T) {
	k := setup(t)
	b := buffer(t, 1<<16, nil)
	bind := whole(b)
	s := kern.dev.NewSequence()
	defer s.Free()
	expectRejected(t, []rejected{
		{"partial block", k.MatMul(s, bind, bind, bind, quant.Q4_K, 1, 1, 100)},
		{"unsupported type", k.MatMul(s, bind, bind, bind, quant.Q2_K, 1, 1, 256)},
		{"float row not vec4", k.MatMul(s, bind, bind, bind, quant.F32, 1, 1, 7)},
		{"short weights", k.MatMul(s, bind, bind, bind, quant.F32, 1, 20000, 4)},
		{"no columns", k.MatVecWith(s, bind, bind, bind, quant.F32, 0, 1, 4, k.MatVec)},
		{"weights off 16 bytes", k.MatVecWith(s, bind, vk.Binding{Buf: b, Off: 8}, bind, quant.Q4_K, 1, 1, 256, k.MatVec)},
		{"micro-tile", k.MatMulTiled(s, bind, bind, bind, quant.F32, 9, 1, 4, Tile{BM: 16, BN: 16, TM: 3, TN: 1})},
		{"shared memory", k.MatMulTiled(s, bind, bind, bind, quant.Q4_K, 9, 1, 256, Tile{BM: 64, BN: 64, TM: 8, TN: 8})},
		{"activation chunk", k.MatMulTiled(s, bind, bind, bind, quant.Q4_K, 9, 1, 256, Tile{BM: 16, BN: 16, TM: 1, TN: 1, KB: 8})},
	})
}
