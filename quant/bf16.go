package quant

import (
	"encoding/binary"
	"math"
)

// BF16: the top 16 bits of an IEEE binary32, little-endian, 2 bytes each.

func bf16ToFloat(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// floatToBF16 rounds to nearest even, as ggml does, rather than truncating
// (truncation biases every value towards zero). NaNs stay NaN: their payload
// could otherwise round into the Inf pattern, so the quiet bit is forced.
func floatToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x40
	}
	return uint16((u + 0x7fff + (u>>16)&1) >> 16)
}

func dequantizeBF16(src []byte, dst []float32) {
	for i := range dst {
		dst[i] = bf16ToFloat(binary.LittleEndian.Uint16(src[2*i:]))
	}
}

func dotBF16(row []byte, x []float32) float32 {
	var sum float64
	for len(x) >= 32 {
		r := (*[64]byte)(row)
		xs := (*[32]float32)(x)
		var s0, s1, s2, s3 float32
		for j := 0; j < 32; j += 4 {
			b := (*[8]byte)(r[2*j:])
			v := (*[4]float32)(xs[j:])
			s0 += bf16ToFloat(binary.LittleEndian.Uint16(b[0:])) * v[0]
			s1 += bf16ToFloat(binary.LittleEndian.Uint16(b[2:])) * v[1]
			s2 += bf16ToFloat(binary.LittleEndian.Uint16(b[4:])) * v[2]
			s3 += bf16ToFloat(binary.LittleEndian.Uint16(b[6:])) * v[3]
		}
		sum += float64((s0 + s1) + (s2 + s3))
		row, x = row[64:], x[32:]
	}
	for i, v := range x {
		sum += float64(bf16ToFloat(binary.LittleEndian.Uint16(row[2*i:])) * v)
	}
	return float32(sum)
}

func quantizeBF16(dst []byte, src []float32) error {
	for i, v := range src {
		binary.LittleEndian.PutUint16(dst[2*i:], floatToBF16(v))
	}
	return nil
}
