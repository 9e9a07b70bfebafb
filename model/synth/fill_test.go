package synth

import (
	"math"
	"testing"

	"github.com/vkinfer/vkinfer/quant"
)

// Every generator, on a tensor large enough that sampling noise is a
// fraction of a percent, gives the intended mean and standard deviation:
// this is what pins the scale constants (q4Unit, q6Unit, q8Unit) down.
func TestDistributions(t *testing.T) {
	const rows, cols = 1 << 12, 1 << 10 // 4M values: 16384 superblocks
	matrix := tensorSpec{name: "m", kind: kindMatrix, shape: []uint64{cols, rows}}
	norm := tensorSpec{name: "n", kind: kindNorm, shape: []uint64{rows * cols}}
	bias := tensorSpec{name: "b", kind: kindBias, shape: []uint64{rows * cols}}
	for _, c := range []struct {
		spec tensorSpec
		typ  quant.Type
	}{
		{matrix, quant.Q4_K}, {matrix, quant.Q6_K}, {matrix, quant.Q8_0}, {matrix, quant.F16}, {matrix, quant.F32},
		{norm, quant.F32}, {bias, quant.F32},
	} {
		b, err := tensorData(c.spec, c.typ, 3, func(uint64) {})
		if err != nil {
			t.Fatal(err)
		}
		vals := make([]float32, rows*cols)
		if err := quant.Dequantize(c.typ, b, vals); err != nil {
			t.Fatal(err)
		}
		mean, std, err := stats(vals)
		d := distOf(c.spec)
		if err != nil || math.Abs(std/d.std-1) > 0.015 || math.Abs(mean-d.mean) > 0.005*d.std {
			t.Errorf("%s %s: mean %.5g std %.5g (%v), want %.5g and %.5g", c.spec.name, c.typ, mean, std, err, d.mean, d.std)
		}
	}
}

// The Q4_K generator's scale/min packing must read back as written: a
// block of all-15 nibbles decodes, sub-block by sub-block, to
// d·sc − dmin·m, which tells every scale and min apart.
func TestPackScaleMin(t *testing.T) {
	sc := [8]uint8{1, 62, 33, 7, 63, 40, 17, 48}
	m := [8]uint8{60, 2, 31, 50, 19, 63, 0, 36}
	blk := make([]byte, quant.Q4_K.BlockBytes())
	blk[1] = 0x3c // d = 1.0 (f16)
	blk[3] = 0x40 // dmin = 2.0
	packScaleMin(blk[4:16], sc, m)
	for i := 16; i < len(blk); i++ {
		blk[i] = 0xff
	}
	vals := make([]float32, 256)
	if err := quant.Dequantize(quant.Q4_K, blk, vals); err != nil {
		t.Fatal(err)
	}
	for j := range 8 {
		want := float32(sc[j])*15 - 2*float32(m[j])
		for _, v := range vals[32*j : 32*j+32] {
			if v != want {
				t.Fatalf("sub-block %d: %g, want %g", j, v, want)
			}
		}
	}
}
