package kernels

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/vkinfer/vkinfer/coopmat"
	"github.com/vkinfer/vkinfer/quant"
	"github.com/vkinfer/vkinfer/vk"
)

// BenchmarkMatMulCoop times the cooperative-matrix product on the Llama-3-8B
// FFN matrices (Q4_K, and the down projection in Q6_K as Q4_K_M stores half
// of them) for -cols activation columns, on the device's matrix
// units with the policy's fragment shape, with the built-in tile (-sweep:
// and CoopTiles); the f16 rounding of the activations (QuantizeF16) is not
// included.
func BenchmarkMatMulCoop(b *testing.B) {
	k := benchSetup(b)
	c := coopmat.Choose(CoopDevice(k.info))
	if !c.On() {
		b.Skipf("no cooperative matrices: %s", c.Reason)
	}
	kc := New(benchDev)
	defer kc.Close()
	kc.CoopMat = c
	var ns []int
	for _, s := range strings.Split(*cols, ",") {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			b.Fatalf("-cols %q: want a comma list of positive counts", *cols)
		}
		ns = append(ns, n)
	}
	type matrix struct {
		t       quant.Type
		rows, K int
	}
	var matrices []matrix
	for _, dims := range benchShapes {
		matrices = append(matrices, matrix{quant.Q4_K, dims[0], dims[1]})
	}
	matrices = append(matrices, matrix{quant.Q6_K, 4096, 14336})
	for _, mat := range matrices {
		qt, rows, K := mat.t, mat.rows, mat.K
		tiles := []CoopTile{kc.CoopTileFor(qt)}
		if *sweep {
			tiles = append(tiles, CoopTiles...)
		}
		mats := benchMatrices(b, qt, rows, K, 0)
		n := slices.Max(ns)
		xh, err := benchDev.NewBuffer(F16Bytes(n, K), false)
		if err != nil {
			b.Fatal(err)
		}
		dst, err := benchDev.NewBuffer(f32(n*rows), false)
		if err != nil {
			b.Fatal(err)
		}
		for _, n := range ns {
			for _, tile := range tiles {
				if err := kc.CheckCoopTile(tile, qt); err != nil {
					b.Logf("%v: %v", tile, err)
					continue
				}
				b.Run(fmt.Sprintf("%dx%d/%s/n%d/%v", rows, K, qt, n, tile), func(b *testing.B) {
					xb := vk.Binding{Buf: xh, Size: F16Bytes(n, K)}
					timeProducts(b, mats, n, rows, K, func(s *vk.Sequence, w vk.Binding) error {
						return kc.MatMulCoop(s, whole(dst), w, xb, qt, n, rows, K, tile)
					})
				})
			}
		}
		for _, m := range mats {
			m.Free()
		}
		xh.Free()
		dst.Free()
	}
}
