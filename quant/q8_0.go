package quant

import "encoding/binary"

// Q8_0: blocks of 32 values in 34 bytes:
//
//	d  f16      bytes 0..1
//	qs int8[32] bytes 2..33   x[i] = d·qs[i]
const (
	q8_0Values = 32
	q8_0Bytes  = 34
)

// int8Float maps a byte to the float value of it as an int8: a table load is
// cheaper than the sign extension and int→float conversion in the dot
// product (measured about 15%).
var int8Float = func() (t [256]float32) {
	for i := range t {
		t[i] = float32(int8(i))
	}
	return t
}()

func dequantizeQ8_0(src []byte, dst []float32) {
	for i := 0; i < len(dst)/q8_0Values; i++ {
		b := (*[q8_0Bytes]byte)(src[i*q8_0Bytes:])
		y := (*[q8_0Values]float32)(dst[i*q8_0Values:])
		d := loadHalf(b[0:])
		for j := range y {
			y[j] = d * int8Float[b[2+j]]
		}
	}
}

func dotQ8_0(row []byte, x []float32) float32 {
	var sum float64
	for i := 0; i < len(x)/q8_0Values; i++ {
		b := (*[q8_0Bytes]byte)(row[i*q8_0Bytes:])
		qs := (*[q8_0Values]byte)(b[2:])
		xs := (*[q8_0Values]float32)(x[i*q8_0Values:])
		var s0, s1, s2, s3 float32
		for j := 0; j < q8_0Values; j += 4 {
			q := (*[4]byte)(qs[j:])
			v := (*[4]float32)(xs[j:])
			s0 += int8Float[q[0]] * v[0]
			s1 += int8Float[q[1]] * v[1]
			s2 += int8Float[q[2]] * v[2]
			s3 += int8Float[q[3]] * v[3]
		}
		sum += float64(loadHalf(b[0:]) * ((s0 + s1) + (s2 + s3)))
	}
	return float32(sum)
}

// quantizeQ8_0 uses levels -127..127, not -128: llama.cpp's x86 kernels
// take |q| with a sign instruction that leaves -128 negative, so files with
// -128 would compute wrongly there.
func quantizeQ8_0(dst []byte, src []float32) error {
	var q [q8_0Values]int8
	for i := 0; i < len(src)/q8_0Values; i++ {
		b := (*[q8_0Bytes]byte)(dst[i*q8_0Bytes:])
		bits, err := quantizeSymmetric(src[i*q8_0Values:(i+1)*q8_0Values], -127, 127, q[:])
		if err != nil {
			return err
		}
		binary.LittleEndian.PutUint16(b[0:], bits)
		for j, l := range q {
			b[2+j] = byte(l)
		}
	}
	return nil
}
