package quant

import (
	"encoding/binary"
	"math"
	"testing"
)

// FuzzKernels feeds arbitrary type ids, bytes and lengths to all three entry
// points: none may panic, and where Dequantize accepts the input and the
// values are finite, Dot must agree with it.
func FuzzKernels(f *testing.F) {
	for _, typ := range supportedTypes {
		n := 2 * typ.BlockSize()
		b := make([]byte, 2*typ.BlockBytes())
		for i := range b {
			b[i] = byte(i * 7)
		}
		f.Add(uint8(typ), b, uint16(n))
		f.Add(uint8(typ), b[1:], uint16(n))
	}
	f.Add(uint8(99), []byte{1, 2, 3}, uint16(1))
	f.Fuzz(func(t *testing.T, id uint8, data []byte, n uint16) {
		typ := Type(id)
		w := make([]float32, n)
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(i%5) - 2
		}
		dot := Dot(typ, data, x)
		if Dequantize(typ, data, w) == nil {
			if finite(w) && !math.IsInf(sumSq(w), 0) {
				checkDot(t, typ, data, w, x)
			}
		} else if !math.IsNaN(float64(dot)) {
			t.Fatalf("%v: Dequantize refused the input but Dot returned %g", typ, dot)
		}
		src := make([]float32, len(data)/4)
		for i := range src {
			src[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
		}
		if b, err := Quantize(typ, src); err == nil {
			if want, _ := typ.RowBytes(len(src)); len(b) != want {
				t.Fatalf("%v: Quantize of %d values gave %d bytes, want %d", typ, len(src), len(b), want)
			}
		}
	})
}

func finite(x []float32) bool {
	for _, v := range x {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return false
		}
	}
	return true
}
