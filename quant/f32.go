package quant

import (
	"encoding/binary"
	"math"
)

// F32: IEEE binary32 values, little-endian, 4 bytes each.

func dequantizeF32(src []byte, dst []float32) {
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
	}
}

func dotF32(row []byte, x []float32) float32 {
	var sum float64
	for len(x) >= 32 {
		r := (*[128]byte)(row)
		xs := (*[32]float32)(x)
		var s0, s1, s2, s3 float32
		for j := 0; j < 32; j += 4 {
			b := (*[16]byte)(r[4*j:])
			v := (*[4]float32)(xs[j:])
			s0 += math.Float32frombits(binary.LittleEndian.Uint32(b[0:])) * v[0]
			s1 += math.Float32frombits(binary.LittleEndian.Uint32(b[4:])) * v[1]
			s2 += math.Float32frombits(binary.LittleEndian.Uint32(b[8:])) * v[2]
			s3 += math.Float32frombits(binary.LittleEndian.Uint32(b[12:])) * v[3]
		}
		sum += float64((s0 + s1) + (s2 + s3))
		row, x = row[128:], x[32:]
	}
	for i, v := range x {
		sum += float64(math.Float32frombits(binary.LittleEndian.Uint32(row[4*i:])) * v)
	}
	return float32(sum)
}

func quantizeF32(dst []byte, src []float32) error {
	for i, v := range src {
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
	}
	return nil
}
