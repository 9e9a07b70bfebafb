package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/vkinfer/vkinfer/coopmat"
	"github.com/vkinfer/vkinfer/quant"
	"github.com/vkinfer/vkinfer/vk"
)

// idChoices are the routings of the gathered products' tests: every
// expert chosen, all but two chosen by none, one taking every pair, and
// random choices.
var idChoices = []struct {
	name   string
	choose func(r *rand.Rand, pair, experts int) int
}{
	{"every expert", func(_ *rand.Rand, p, experts int) int { return p % experts }},
	{"none but two", func(_ *rand.Rand, p, experts int) int { return []int{1, experts - 2}[p%2] }},
	{"one takes all", func(_ *rand.Rand, _, experts int) int { return experts / 2 }},
	{"random", func(r *rand.Rand, _, experts int) int { return r.IntN(experts) }},
}

// idTokens are the batches' token counts: one token, fewer than a tile,
// a partial tile, many tiles of one expert.
var idTokens = []int{1, 7, 37, 255}

// idCase is one gathered product: tokens of topK pairs each among experts
// of rows x K weights, x holding a row per token or (perPair) per pair.
type idCase struct {
	tokens, topK, experts, rows, K int
	perPair                        bool
	choice                         int // index into idChoices
}

func (c idCase) String() string {
	x := "token"
	if c.perPair {
		x = "pair"
	}
	return fmt.Sprintf("%s/n%d/%dx%d/x per %s", idChoices[c.choice].name, c.tokens, c.rows, c.K, x)
}

// idProduct records a gathered product of the case into dst from the f32
// activations x (rounding them first where the kernel needs it) and the
// sorted pairs.
type idProduct func(s *vk.Sequence, dst, w, x vk.Binding, srt Sorted, xRows int) error

// testID runs MoESort and the gathered product rec (tiles of height bn) on
// random weights of type qt and random activations, and compares every
// pair's row with the float64 product of its expert's dequantized weights
// and its activation row (xVals maps x to the values the kernel computes
// with: x itself, or x rounded to 8 bits), within tol of Σ|w·x|. dst
// starts as NaN, so a pair left unwritten fails, and the words around it
// must stay NaN.
func testID(t *testing.T, k *Kernels, qt quant.Type, c idCase, bn int, tol float64,
	xVals func(t *testing.T, x []float32, rows, K int) []float32, rec idProduct) {
	t.Helper()
	r := rand.New(rand.NewPCG(uint64(c.tokens*100+c.rows), uint64(c.K*10+c.choice)))
	pairs := c.tokens * c.topK
	raw, deq := quantized(t, r, qt, c.experts*c.rows, c.K)
	xRows := c.tokens
	if c.perPair {
		xRows = pairs
	}
	x := normals(r, xRows*c.K, 1)
	ids := make([]float32, pairs)
	for p := range ids {
		ids[p] = float32(idChoices[c.choice].choose(r, p, c.experts))
	}
	const dOff, guard = 64, 64
	w := weightsAt(t, raw, 256)
	xb, ib := floatBuffer(t, x), floatBuffer(t, ids)
	sb := buffer(t, 16+f32(MoESortWords(pairs, c.experts, bn)), nil)
	nan := make([]float32, (dOff+f32(pairs*c.rows)+guard)/4)
	for i := range nan {
		nan[i] = float32(math.NaN())
	}
	db := floatBuffer(t, nan)
	srt := Sorted{B: vk.Binding{Buf: sb, Off: 16}, Pairs: pairs, TopK: c.topK, Experts: c.experts, Height: bn}
	run(t, func(s *vk.Sequence) error {
		if err := k.MoESort(s, srt.B, whole(ib), pairs, c.experts, bn); err != nil {
			return err
		}
		s.Barrier()
		return rec(s, vk.Binding{Buf: db, Off: dOff, Size: f32(pairs * c.rows)}, w, whole(xb), srt, xRows)
	})
	xv := xVals(t, x, xRows, c.K)
	want, scale := make([]float64, pairs*c.rows), make([]float64, pairs*c.rows)
	for p := range pairs {
		e := int(ids[p])
		xr := p
		if !c.perPair {
			xr = p / c.topK
		}
		w1, s1 := matRef(deq[e*c.rows*c.K:(e+1)*c.rows*c.K], xv[xr*c.K:(xr+1)*c.K], 1, c.rows, c.K)
		copy(want[p*c.rows:], w1)
		copy(scale[p*c.rows:], s1)
	}
	all := read(t, db, 0, len(nan))
	compare(t, "dst", all[dOff/4:dOff/4+pairs*c.rows], want, scale, tol)
	for i, v := range append(all[:dOff/4:dOff/4], all[dOff/4+pairs*c.rows:]...) {
		if !math.IsNaN(float64(v)) {
			t.Fatalf("word %d outside dst written: %g", i, v)
		}
	}
}

// idCases cycles the routings, token counts and row counts (none a
// multiple of a tile) over the weight types so that each type meets every
// routing and each routing every token count; x per token and per pair
// alternate.
func idCases(types []quant.Type, each func(qt quant.Type, c idCase)) {
	rows := []int{40, 7, 33}
	i := 0
	for ti, qt := range types {
		K := kFor(qt)[1] // a few blocks: 3 superblocks of K-quants, 3 Q8_0 blocks
		if isFloat(qt) {
			K = 104 // whole f16 words (matmul_coopmat), a partial 16-value piece
		}
		for ci := range idChoices {
			each(qt, idCase{tokens: idTokens[(ti+ci)%len(idTokens)], topK: 2 + i%3, experts: 6 + 5*(i%2),
				rows: rows[i%len(rows)], K: K, perPair: i%2 == 1, choice: ci})
			i++
		}
	}
}

// identity is xVals for kernels that compute with x as it is.
func identity(_ *testing.T, x []float32, _, _ int) []float32 { return x }

// TestMatMulTiledID checks the gathered product on the f32 tiled kernel
// (matmul_id) for the weight types of tiny-qwen3moe (F32 and its Q4_K_M
// mix's Q4_K, Q5_K, Q6_K, Q8_0) and F16, with the device's tile, small
// square ones and one 13 wide (tiles of 13 pairs).
func TestMatMulTiledID(t *testing.T) {
	k := setup(t)
	tiles := []Tile{k.Tile, {BM: 16, BN: 16, TM: 2, TN: 2}, {BM: 13, BN: 13, TM: 1, TN: 1}, {BM: 32, BN: 32, TM: 4, TN: 4, F16: true}}
	i := 0
	idCases([]quant.Type{quant.Q4_K, quant.Q5_K, quant.Q6_K, quant.Q8_0, quant.F32, quant.F16}, func(qt quant.Type, c idCase) {
		tile := tiles[i%len(tiles)]
		i++
		if tile.SharedBytes(qt)+idShared(tile.BN) > k.info.SharedMemory {
			tile.F16 = true
		}
		t.Run(fmt.Sprintf("%s/%v/%v", qt, c, tile), func(t *testing.T) {
			testID(t, k, qt, c, tile.BN, tileTol(c.K, tile), identity, func(s *vk.Sequence, dst, w, x vk.Binding, srt Sorted, xRows int) error {
				return k.MatMulTiledID(s, dst, w, x, srt, qt, xRows, c.rows, c.K, tile)
			})
		})
	})
}

// TestMatMulQ8ID checks the gathered product on 8-bit activations
// (matmul_q8_id) for the quantized types of tiny-qwen3moe's Q4_K_M mix,
// with the tile MoETileQ8 picks, small square ones and one 13 wide, against
// the product of the activations as QuantizeQ8 rounds them.
func TestMatMulQ8ID(t *testing.T) {
	k := setup(t)
	if !k.info.IntegerDot {
		srt := Sorted{B: whole(kern.dummy), Pairs: 2, TopK: 2, Experts: 2, Height: 16}
		refusesQ8(t, k.MatMulQ8ID(nil, whole(kern.dummy), whole(kern.dummy), whole(kern.dummy), srt, quant.Q4_K, 1, 16, 256, Tile{BM: 16, BN: 16, TM: 2, TN: 2}))
		return
	}
	i := 0
	idCases([]quant.Type{quant.Q4_K, quant.Q5_K, quant.Q6_K, quant.Q8_0}, func(qt quant.Type, c idCase) {
		tile := []Tile{k.MoETileQ8(c.tokens*c.topK, c.experts), {BM: 16, BN: 16, TM: 2, TN: 2}, {BM: 13, BN: 13, TM: 1, TN: 1}}[i%3]
		i++
		t.Run(fmt.Sprintf("%s/%v/%v", qt, c, tile), func(t *testing.T) {
			var qb *vk.Buffer
			q8 := func(t *testing.T, x []float32, rows, K int) []float32 {
				return q8Values(t, readBytes(t, qb), x, rows, K)
			}
			testID(t, k, qt, c, tile.BN, dotTol(c.K), q8, func(s *vk.Sequence, dst, w, x vk.Binding, srt Sorted, xRows int) error {
				qb = buffer(t, Q8Bytes(xRows, c.K), nil)
				if err := k.QuantizeQ8(s, whole(qb), x, xRows, c.K); err != nil {
					return err
				}
				s.Barrier()
				return k.MatMulQ8ID(s, dst, w, whole(qb), srt, qt, xRows, c.rows, c.K, tile)
			})
		})
	})
}

// TestMatMulCoopID checks the gathered cooperative-matrix product
// (matmul_coopmat_id) on the emulation everywhere and on the device's
// matrix units where it has them, for the quantized types of
// tiny-qwen3moe's Q4_K_M mix and F16, with the tile MoECoopTile picks, one
// of a single fragment and one of 48 columns in three subgroup parts
// (tiles whose pairs leave whole parts and fragments to skip).
func TestMatMulCoopID(t *testing.T) {
	for name, k := range coopKernels(t, coopmat.Shape{}) {
		t.Run(name, func(t *testing.T) {
			i := 0
			idCases([]quant.Type{quant.Q4_K, quant.Q5_K, quant.Q6_K, quant.Q8_0, quant.F16}, func(qt quant.Type, c idCase) {
				tile := []CoopTile{k.MoECoopTile(qt), {BM: 16, BN: 16, WM: 16, WN: 16, BK: 256, KC: 16},
					{BM: 32, BN: 48, WM: 16, WN: 16, BK: 128, KC: 32}}[i%3]
				i++
				t.Run(fmt.Sprintf("%s/%v/%v", qt, c, tile), func(t *testing.T) {
					// Weights and activations are each rounded to f16
					// (2^-11, 2^-10 allowed for drivers that truncate).
					testID(t, k, qt, c, tile.BN, dotTol(c.K)+2.0/1024, identity, func(s *vk.Sequence, dst, w, x vk.Binding, srt Sorted, xRows int) error {
						hb := buffer(t, F16Bytes(xRows, c.K), nil)
						if err := k.QuantizeF16(s, whole(hb), x, xRows, c.K); err != nil {
							return err
						}
						s.Barrier()
						return k.MatMulCoopID(s, dst, w, whole(hb), srt, qt, xRows, c.rows, c.K, tile)
					})
				})
			})
		})
	}
}

// TestMatMulIDRejects: shapes the gathered products cannot take are
// refused in one line, before anything is recorded.
func TestMatMulIDRejects(t *testing.T) {
	k := setup(t)
	emu := New(kern.dev)
	emu.CoopEmulated = true
	t.Cleanup(emu.Close)
	b := buffer(t, 1<<20, nil)
	bind := whole(b)
	s := kern.dev.NewSequence()
	defer s.Free()
	tile := Tile{BM: 16, BN: 16, TM: 2, TN: 2}
	srt := Sorted{B: bind, Pairs: 8, TopK: 2, Experts: 4, Height: 16}
	other := srt
	other.Height = 32
	bad := srt
	bad.Experts = MaxExperts + 1
	expectRejected(t, []rejected{
		{"height not the tile's", k.MatMulTiledID(s, bind, bind, bind, other, quant.Q4_K, 4, 16, 256, tile)},
		{"x rows", k.MatMulTiledID(s, bind, bind, bind, srt, quant.Q4_K, 5, 16, 256, tile)},
		{"experts", k.MatMulTiledID(s, bind, bind, bind, bad, quant.Q4_K, 4, 16, 256, tile)},
		{"short sorted pairs", k.MatMulTiledID(s, bind, bind, bind, Sorted{B: vk.Binding{Buf: b, Size: 16}, Pairs: 8, TopK: 2, Experts: 4, Height: 16}, quant.Q4_K, 4, 16, 256, tile)},
		{"short weights", k.MatMulTiledID(s, bind, bind, bind, srt, quant.F32, 4, 1024, 128, tile)},
		{"q8 of F32 weights", k.MatMulQ8ID(s, bind, bind, bind, srt, quant.F32, 4, 16, 256, tile)},
		{"coop off", k.MatMulCoopID(s, bind, bind, bind, srt, quant.Q4_K, 4, 16, 256, CoopTile{BM: 16, BN: 16, WM: 16, WN: 16, BK: 256, KC: 16})},
		{"coop of F32 weights", emu.MatMulCoopID(s, bind, bind, bind, srt, quant.F32, 4, 16, 256, CoopTile{BM: 16, BN: 16, WM: 16, WN: 16, BK: 256, KC: 16})},
	})
}
