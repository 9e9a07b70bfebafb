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
