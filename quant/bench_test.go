package quant

import (
	"testing"
)

// benchRow returns a 4096-value row of type typ quantized from normal data
// at a typical weight scale, and an activation vector.
func benchRow(b *testing.B, typ Type) ([]byte, []float32) {
	w := gaussian(21, 4096)
	for i := range w {
		w[i] *= 0.02
	}
	row, err := Quantize(typ, w)
	if err != nil {
		b.Fatal(err)
	}
	return row, gaussian(22, 4096)
}

// BenchmarkDot reports GB/s of weight bytes read, the figure of merit of a
// bandwidth-bound matrix-vector product.
func BenchmarkDot(b *testing.B) {
	for _, typ := range []Type{Q4_K, Q6_K, Q8_0, Q5_K, Q4_0, F32, F16, BF16} {
		b.Run(typ.String(), func(b *testing.B) {
			row, x := benchRow(b, typ)
			b.SetBytes(int64(len(row)))
			var sink float32
			for b.Loop() {
				sink += Dot(typ, row, x)
			}
			_ = sink
		})
	}
}

func BenchmarkDequantize(b *testing.B) {
	for _, typ := range []Type{Q4_K, Q6_K, Q8_0} {
		b.Run(typ.String(), func(b *testing.B) {
			row, _ := benchRow(b, typ)
			dst := make([]float32, 4096)
			b.SetBytes(int64(len(row)))
			for b.Loop() {
				if err := Dequantize(typ, row, dst); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkQuantize reports input bytes (4 per value) per second.
func BenchmarkQuantize(b *testing.B) {
	x := gaussian(23, 4096)
	for _, typ := range []Type{Q4_K, Q6_K, Q8_0} {
		b.Run(typ.String(), func(b *testing.B) {
			b.SetBytes(4 * int64(len(x)))
			for b.Loop() {
				if _, err := Quantize(typ, x); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
