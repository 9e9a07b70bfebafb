package quant

import "encoding/binary"

// Q4_0: blocks of 32 values in 18 bytes:
//
//	d  f16       bytes 0..1
//	qs [16]byte  bytes 2..17: value j (j < 16) is the low nibble of qs[j],
//	             value j+16 the high nibble;   x = (q - 8)·d
const (
	q4_0Values = 32
	q4_0Bytes  = 18
)

// q4_0Levels maps a nibble to its signed level, replacing a per-value
// int→float conversion in the dot product with a table load.
var q4_0Levels = func() (t [16]float32) {
	for i := range t {
		t[i] = float32(i - 8)
	}
	return t
}()

func dequantizeQ4_0(src []byte, dst []float32) {
	for i := 0; i < len(dst)/q4_0Values; i++ {
		b := (*[q4_0Bytes]byte)(src[i*q4_0Bytes:])
		y := (*[q4_0Values]float32)(dst[i*q4_0Values:])
		d := loadHalf(b[0:])
		for j := range 16 {
			y[j] = d * q4_0Levels[b[2+j]&15]
			y[j+16] = d * q4_0Levels[b[2+j]>>4]
		}
	}
}

func dotQ4_0(row []byte, x []float32) float32 {
	var sum float64
	for i := 0; i < len(x)/q4_0Values; i++ {
		b := (*[q4_0Bytes]byte)(row[i*q4_0Bytes:])
		qs := (*[16]byte)(b[2:])
		lo := (*[16]float32)(x[i*q4_0Values:])
		hi := (*[16]float32)(x[i*q4_0Values+16:])
		var s0, s1, s2, s3 float32
		for j := 0; j < 16; j += 2 {
			q := (*[2]byte)(qs[j:])
			l := (*[2]float32)(lo[j:])
			h := (*[2]float32)(hi[j:])
			s0 += q4_0Levels[q[0]&15] * l[0]
			s1 += q4_0Levels[q[1]&15] * l[1]
			s2 += q4_0Levels[q[0]>>4] * h[0]
			s3 += q4_0Levels[q[1]>>4] * h[1]
		}
		sum += float64(loadHalf(b[0:]) * ((s0 + s1) + (s2 + s3)))
	}
	return float32(sum)
}

func quantizeQ4_0(dst []byte, src []float32) error {
	var q [q4_0Values]int8
	for i := 0; i < len(src)/q4_0Values; i++ {
		b := (*[q4_0Bytes]byte)(dst[i*q4_0Bytes:])
		bits, err := quantizeSymmetric(src[i*q4_0Values:(i+1)*q4_0Values], -8, 7, q[:])
		if err != nil {
			return err
		}
		binary.LittleEndian.PutUint16(b[0:], bits)
		for j := range 16 {
			b[2+j] = byte(q[j]+8) | byte(q[j+16]+8)<<4
		}
	}
	return nil
}
