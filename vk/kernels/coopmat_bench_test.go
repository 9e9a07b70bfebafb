package kernels

import (
	"fmt"
	"slices"
	"testing"

	"github.com/vkinfer/vkinfer/coopmat"
	"github.com/vkinfer/vkinfer/vk"
)

// BenchmarkMatMulCoop times the cooperative-matrix product on the Llama-3-8B
// prefill matrices (Q4_K gate/up, q/o and down, and the down projection in
// Q6_K as Q4_K_M stores half of them) for -cols activation columns, on the
// device's matrix units with the policy's fragment shapes: the f16 variant
// (f16 in the name) and, where the device has 8-bit fragments it takes
// (coopmat.Int8Shape) and shaderInt8, the integer variant (i8), each with
// its built-in tile (-sweep: and CoopTiles, CoopInt8Tiles). The rounding
// of the activations (QuantizeF16, QuantizeQ8) is not included; TFLOP/s
// counts 2·rows·K·columns for both.
func BenchmarkMatMulCoop(b *testing.B) {
	k := benchSetup(b)
	c := coopmat.Choose(CoopDevice(k.info))
	if !c.On() {
		b.Skipf("no cooperative matrices: %s", c.Reason)
	}
	kc := New(benchDev)
	defer kc.Close()
	kc.CoopMat = c
	int8 := false
	if s, why := coopmat.Int8Shape(c); s.IsZero() || !k.info.Int8 {
		b.Logf("no integer variant: %s (shaderInt8 %v)", why, k.info.Int8)
	} else {
		int8 = true
	}
	ns := benchCols(b)
	for _, mat := range benchModel(b) {
		qt, rows, K := mat.t, mat.rows, mat.K
		mats := benchMatrices(b, qt, rows, K, 0)
		n := slices.Max(ns)
		x, err := benchDev.NewBuffer(max(F16Bytes(n, K), Q8Bytes(n, K)), false)
		if err != nil {
			b.Fatal(err)
		}
		dst, err := benchDev.NewBuffer(f32(n*rows), false)
		if err != nil {
			b.Fatal(err)
		}
		for _, n := range ns {
			tiles := []CoopTile{kc.CoopTileForShape(qt, rows, n)}
			if *sweep {
				tiles = append(tiles, CoopTiles...)
			}
			for _, tile := range tiles {
				if err := kc.CheckCoopTile(tile, qt); err != nil {
					b.Logf("%v: %v", tile, err)
					continue
				}
				b.Run(fmt.Sprintf("%dx%d/%s/n%d/f16/%v", rows, K, qt, n, tile), func(b *testing.B) {
					xb := vk.Binding{Buf: x, Size: F16Bytes(n, K)}
					timeProducts(b, mats, n, rows, K, func(s *vk.Sequence, w vk.Binding) error {
						return kc.MatMulCoop(s, whole(dst), w, xb, qt, n, rows, K, tile)
					})
				})
			}
			if !int8 {
				continue
			}
			tiles = []CoopTile{kc.CoopInt8TileForShape(qt, rows, n)}
			if *sweep {
				tiles = append(tiles, CoopInt8Tiles...)
			}
			for _, tile := range tiles {
				if err := kc.CheckCoopInt8Tile(tile, qt); err != nil {
					b.Logf("%v: %v", tile, err)
					continue
				}
				b.Run(fmt.Sprintf("%dx%d/%s/n%d/i8/%v", rows, K, qt, n, tile), func(b *testing.B) {
					xb := vk.Binding{Buf: x, Size: Q8Bytes(n, K)}
					timeProducts(b, mats, n, rows, K, func(s *vk.Sequence, w vk.Binding) error {
						return kc.MatMulCoopInt8(s, whole(dst), w, xb, qt, n, rows, K, tile)
					})
				})
			}
		}
		for _, m := range mats {
			m.Free()
		}
		x.Free()
		dst.Free()
	}
}
