package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/vkinfer/vkinfer/coopmat"
	"github.com/vkinfer/vkinfer/quant"
	"github.com/vkinfer/vkinfer/vk"
)

// BenchmarkMoEPrefill times a Qwen3-30B-A3B prefill batch's expert
// products packed by expert: 128 experts, 8 distinct ones chosen at random
// by each of -cols tokens (the first of the list; 512 by default), for the
// gate and up matrices (768 rows of 2048, Q4_K, x per token) and down
// (2048 rows of 768, Q6_K and Q4_K, x per pair), on the kernel the engine
// picks (the matrix units where the device has them, else 8-bit
// activations where it has integer dot products, else f32) with its tile,
// and with -sweep other tiles of that kernel. It reports the useful
// TFLOP/s (2·pairs·rows·K) and µs per product, and moe_sort's µs (once
// per layer) apart; the activations' rounding is not included.
func BenchmarkMoEPrefill(b *testing.B) {
	k := benchSetup(b)
	const experts, topK = 128, 8
	n := benchCols(b)[0]
	pairs := n * topK
	kc := k
	if c := coopmat.Choose(CoopDevice(k.info)); c.On() {
		kc = New(benchDev)
		defer kc.Close()
		kc.CoopMat = c
	}
	r := rand.New(rand.NewPCG(7, 8))
	ids := make([]float32, 0, pairs)
	for range n {
		for _, e := range r.Perm(experts)[:topK] {
			ids = append(ids, float32(e))
		}
	}
	idb := benchBuffer(b, f32(pairs))
	if err := idb.Write(0, f32Bytes(ids)); err != nil {
		b.Fatal(err)
	}
	sortRun := func(b *testing.B, bn int) Sorted {
		sb := benchBuffer(b, f32(MoESortWords(pairs, experts, bn)))
		srt := Sorted{B: whole(sb), Pairs: pairs, TopK: topK, Experts: experts, Height: bn}
		s := benchDev.NewSequence()
		defer s.Free()
		if err := k.MoESort(s, srt.B, whole(idb), pairs, experts, bn); err != nil {
			b.Fatal(err)
		}
		if err := s.End(); err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("moe_sort/%d pairs/tiles of %d", pairs, bn), func(b *testing.B) {
			if gpu := runTimed(b, s); gpu > 0 {
				b.ReportMetric(gpu/float64(b.N), "us/op")
			}
		})
		return srt
	}
	sorts := map[int]Sorted{} // by tile width, sorted (and timed) once
	for _, m := range []struct {
		t       quant.Type
		rows, K int
		perPair bool
	}{{quant.Q4_K, 768, 2048, false}, {quant.Q6_K, 2048, 768, true}, {quant.Q4_K, 2048, 768, true}} {
		qt, rows, K := m.t, m.rows, m.K
		rb, err := qt.RowBytes(K)
		if err != nil {
			b.Fatal(err)
		}
		if size := uint64(experts * rows * rb); size > k.info.MaxStorageRange {
			b.Logf("%dx%d %s: %d experts' %d bytes exceed one binding of this device", rows, K, qt, experts, size)
			continue
		}
		w := benchMatrices(b, qt, experts*rows, K, 0)[0]
		xRows := n
		if m.perPair {
			xRows = pairs
		}
		x := benchBuffer(b, max(F16Bytes(xRows, K), Q8Bytes(xRows, K), f32(xRows*K)))
		dst := benchBuffer(b, f32(pairs*rows))
		name := fmt.Sprintf("%dx%d/%s/%d pairs", rows, K, qt, pairs)
		var runs []struct {
			tile string
			bn   int
			rec  func(s *vk.Sequence, w vk.Binding, srt Sorted) error
		}
		add := func(tile string, bn int, rec func(s *vk.Sequence, w vk.Binding, srt Sorted) error) {
			runs = append(runs, struct {
				tile string
				bn   int
				rec  func(s *vk.Sequence, w vk.Binding, srt Sorted) error
			}{tile, bn, rec})
		}
		coop := kc.UseCoop(qt, n, K)
		if coop {
			tiles := []CoopTile{kc.MoECoopTile(qt)}
			if *sweep {
				tiles = append(tiles, moeCoopTiles...)
				tiles = append(tiles, CoopTile{BM: 128, BN: 32, WM: 64, WN: 32, BK: 64, KC: 64},
					CoopTile{BM: 128, BN: 128, WM: 64, WN: 32, BK: 64, KC: 64}, CoopTile{BM: 64, BN: 64, WM: 32, WN: 32, BK: 128, KC: 64},
					CoopTile{BM: 64, BN: 32, WM: 32, WN: 16, BK: 64, KC: 64}, CoopTile{BM: 64, BN: 32, WM: 16, WN: 32, BK: 64, KC: 64},
					CoopTile{BM: 128, BN: 32, WM: 32, WN: 32, BK: 64, KC: 64}, CoopTile{BM: 64, BN: 32, WM: 32, WN: 32, BK: 64, KC: 64},
					CoopTile{BM: 32, BN: 64, WM: 16, WN: 32, BK: 64, KC: 64}, CoopTile{BM: 64, BN: 64, WM: 16, WN: 32, BK: 64, KC: 64},
					CoopTile{BM: 64, BN: 32, WM: 32, WN: 16, BK: 128, KC: 32}, CoopTile{BM: 64, BN: 32, WM: 16, WN: 32, BK: 128, KC: 32},
					CoopTile{BM: 64, BN: 32, WM: 32, WN: 32, BK: 128, KC: 32}, CoopTile{BM: 128, BN: 32, WM: 32, WN: 32, BK: 128, KC: 32},
					CoopTile{BM: 64, BN: 32, WM: 32, WN: 16, BK: 128, KC: 64}, CoopTile{BM: 32, BN: 32, WM: 16, WN: 16, BK: 64, KC: 64},
					CoopTile{BM: 64, BN: 16, WM: 16, WN: 16, BK: 64, KC: 64}, CoopTile{BM: 64, BN: 16, WM: 32, WN: 16, BK: 64, KC: 64},
					CoopTile{BM: 64, BN: 16, WM: 16, WN: 16, BK: 128, KC: 32}, CoopTile{BM: 64, BN: 32, WM: 32, WN: 16, BK: 64, KC: 32},
					CoopTile{BM: 128, BN: 32, WM: 32, WN: 16, BK: 64, KC: 64}, CoopTile{BM: 128, BN: 32, WM: 32, WN: 16, BK: 128, KC: 32})
			}
			for _, tile := range tiles {
				if err := kc.checkCoopTileID(tile, qt); err != nil {
					continue
				}
				add("coop/"+tile.String(), tile.BN, func(s *vk.Sequence, w vk.Binding, srt Sorted) error {
					return kc.MatMulCoopID(s, whole(dst), w, whole(x), srt, qt, xRows, rows, K, tile)
				})
			}
		}
		// With -sweep the 8-bit tiles run beside the matrix units' too.
		if k.UseQ8(qt) && (!coop || *sweep) {
			tiles := []Tile{k.MoETileQ8(pairs, experts)}
			if *sweep {
				tiles = append(tiles, Q8Tiles...)
			}
			for _, tile := range tiles {
				if k.checkTile(tile, qt, tile.Q8SharedBytes(qt)+idShared(tile.BN)) != nil {
					continue
				}
				add("q8/"+tile.String(), tile.BN, func(s *vk.Sequence, w vk.Binding, srt Sorted) error {
					return k.MatMulQ8ID(s, whole(dst), w, whole(x), srt, qt, xRows, rows, K, tile)
				})
			}
		}
		if !coop && !k.UseQ8(qt) {
			tile := k.TileFor(qt)
			add("f32/"+tile.String(), tile.BN, func(s *vk.Sequence, w vk.Binding, srt Sorted) error {
				return k.MatMulTiledID(s, whole(dst), w, whole(x), srt, qt, xRows, rows, K, tile)
			})
		}
		for _, run := range runs {
			srt, ok := sorts[run.bn]
			if !ok {
				srt = sortRun(b, run.bn)
				sorts[run.bn] = srt
			}
			b.Run(name+"/"+run.tile, func(b *testing.B) {
				timeProducts(b, []*vk.Buffer{w}, pairs, rows, K, func(s *vk.Sequence, w vk.Binding) error {
					return run.rec(s, w, srt)
				})
			})
		}
		w.Free()
	}
}

// benchBuffer is a device buffer of n bytes on the benchmarks' device,
// freed when b ends.
func benchBuffer(b *testing.B, n int64) *vk.Buffer {
	buf, err := benchDev.NewBuffer(round4(n), false)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(buf.Free)
	return buf
}

// BenchmarkMoEDecode times a Qwen3-30B-A3B decode token's expert products
// as decode chains them, with 8-bit activations: matvec_id_glu_q8 (the 8
// chosen experts' gate and up, 768 rows of 2048 in Q4_K, writing the
// gated activation's q8 copy) then matvec_id_sum_q8 (their down, 2048
// rows of 768 in Q6_K and in Q4_K, mixed into the residual), a barrier
// after each. Each pair of products takes its own 8 distinct experts at
// random, so the weights come from memory as a token's do (the stacks
// are 226 and 165 MB). It reports µs a product for each, in the engine's
// shapes and, with -sweep, in other lane and row counts.
func BenchmarkMoEDecode(b *testing.B) {
	k := benchSetup(b)
	if !k.info.IntegerDot {
		b.Skip("no integer dot products")
	}
	const topK, ff, embd, calls = 8, 768, 2048, 64
	const stride = 256 // bytes between the calls' ids and weights: any offset alignment
	rbGU, err := quant.Q4_K.RowBytes(embd)
	if err != nil {
		b.Fatal(err)
	}
	experts := 128
	for experts > 2*topK && uint64(2*experts*ff*rbGU) > k.info.MaxStorageRange {
		experts /= 2 // lavapipe's bindings: the timings are then not a token's
	}
	r := rand.New(rand.NewPCG(9, 10))
	idv := make([]float32, calls*stride/4)
	wv := make([]float32, calls*stride/4)
	for c := range calls {
		for j, e := range r.Perm(experts)[:topK] {
			idv[c*stride/4+j] = float32(e)
			wv[c*stride/4+j] = 1.0 / topK
		}
	}
	ids, mix := benchBuffer(b, int64(calls*stride)), benchBuffer(b, int64(calls*stride))
	if err := ids.Write(0, f32Bytes(idv)); err != nil {
		b.Fatal(err)
	}
	if err := mix.Write(0, f32Bytes(wv)); err != nil {
		b.Fatal(err)
	}
	gu := benchMatrices(b, quant.Q4_K, 2*experts*ff, embd, 0)[0]
	defer gu.Free()
	gate := vk.Binding{Buf: gu, Size: int64(experts * ff * rbGU)}
	up := vk.Binding{Buf: gu, Off: gate.Size, Size: gate.Size}
	x := benchBuffer(b, Q8Bytes(1, embd))
	if err := x.Write(0, make([]byte, Q8Bytes(1, embd))); err != nil {
		b.Fatal(err)
	}
	act := benchBuffer(b, f32(topK*ff))
	actQ8 := benchBuffer(b, Q8Bytes(topK, ff))
	res := benchBuffer(b, f32(embd))
	at := func(buf *vk.Buffer, c int) vk.Binding {
		return vk.Binding{Buf: buf, Off: int64(c * stride), Size: f32(topK)}
	}
	q8 := whole(actQ8)

	gluShapes := []MatVecShape{k.IDGLUShape(true, ff, embd, topK)}
	if *sweep {
		for _, l := range []int{32, 64, 128, 256} {
			for _, rows := range []int{2, 4, 8, 16} {
				if sh := (MatVecShape{Lanes: l, Rows: rows, Unroll: 1}); sh != gluShapes[0] {
					gluShapes = append(gluShapes, sh)
				}
			}
		}
	}
	for _, sh := range gluShapes {
		b.Run(fmt.Sprintf("glu/%dx%d/Q4_K/%s", ff, embd, sh), func(b *testing.B) {
			timeChain(b, calls, func(s *vk.Sequence, c int) error {
				return k.MatVecIDGLUWith(s, SwiGLU, whole(act), gate, up, whole(x), at(ids, c), &q8, quant.Q4_K, topK, topK, 1, experts, ff, embd, sh, true)
			})
		})
	}
	for _, qt := range []quant.Type{quant.Q6_K, quant.Q4_K} {
		down := benchMatrices(b, qt, experts*embd, ff, 0)[0]
		sumShapes := []MatVecShape{k.IDSumShape(qt, true, embd, ff, topK)}
		if *sweep {
			for _, l := range []int{32, 64, 128, 256} {
				for _, rows := range []int{1, 2, 4, 8} {
					for _, u := range []int{1, 2} {
						if sh := (MatVecShape{Lanes: l, Rows: rows, Unroll: u}); sh != sumShapes[0] {
							sumShapes = append(sumShapes, sh)
						}
					}
				}
			}
		}
		for _, sh := range sumShapes {
			b.Run(fmt.Sprintf("sum/%dx%d/%s/%s", embd, ff, qt, sh), func(b *testing.B) {
				timeChain(b, calls, func(s *vk.Sequence, c int) error {
					return k.MatVecIDSumWith(s, whole(res), whole(down), q8, at(ids, c), at(mix, c), whole(res), qt, 1, topK, topK, experts, embd, ff, sh, true)
				})
			})
		}
		down.Free()
	}
}

// timeChain records calls dependent dispatches of rec, a barrier after
// each, and reports the GPU µs of one.
func timeChain(b *testing.B, calls int, rec func(s *vk.Sequence, c int) error) {
	s := benchDev.NewSequence()
	defer s.Free()
	for c := range calls {
		if err := rec(s, c); err != nil {
			b.Fatal(err)
		}
		s.Barrier()
	}
	if err := s.End(); err != nil {
		b.Fatal(err)
	}
	if gpu := runTimed(b, s); gpu > 0 {
		b.ReportMetric(gpu/float64(b.N*calls), "us/op")
	}
}
