package quant

import "encoding/binary"

// Q6_K: super-blocks of 256 values in 210 bytes:
//
//	ql [128]       bytes 0..127    low 4 bits of the 6-bit levels
//	qh [64]        bytes 128..191  top 2 bits
//	scales int8[16] bytes 192..207 one per 16-value sub-block (value v uses scales[v/16])
//	d  f16         bytes 208..209  (last, so the block is only 2-byte aligned)
//
// x = d·scales[v/16]·(q − 32) with q in 0..63. Each 128-value half n (0, 1)
// uses ql[64n..64n+63] and qh[32n..32n+31]; within it, for l in 0..31, the
// values l, l+32, l+64, l+96 take the low nibble of ql[l], the low nibble of
// ql[l+32], the high nibble of ql[l] and the high nibble of ql[l+32], and
// bits 0-1, 2-3, 4-5, 6-7 of qh[l].
const (
	q6KBytes  = 210
	q6KQh     = 128
	q6KScales = 192
	q6KD      = 208
)

// q6KLevels maps a 6-bit code to its signed level q − 32, replacing an
// int→float conversion per value with a table load.
var q6KLevels = func() (t [64]float32) {
	for i := range t {
		t[i] = float32(i - 32)
	}
	return t
}()

func dequantizeQ6K(src []byte, dst []float32) {
	for i := 0; i < len(dst)/kValues; i++ {
		b := (*[q6KBytes]byte)(src[i*q6KBytes:])
		y := (*[kValues]float32)(dst[i*kValues:])
		d := loadHalf(b[q6KD:])
		var a [16]float32
		for j := range a {
			a[j] = d * float32(int8(b[q6KScales+j]))
		}
		for n := range 2 {
			ql := (*[64]byte)(b[64*n:])
			qh := (*[32]byte)(b[q6KQh+32*n:])
			yh := (*[128]float32)(y[128*n:])
			for l, h := range qh {
				s := 8*n + l/16
				yh[l] = a[s] * q6KLevels[(ql[l]&15|h<<4)&63]
				yh[l+32] = a[s+2] * q6KLevels[(ql[l+32]&15|h>>2<<4)&63]
				yh[l+64] = a[s+4] * q6KLevels[(ql[l]>>4|h>>4<<4)&63]
				yh[l+96] = a[s+6] * q6KLevels[(ql[l+32]>>4|h>>6<<4)&63]
			}
		}
	}
}

// dotQ6K assembles the 6-bit codes of four consecutive l at once in 32-bit
// words (a byte per value: the low nibbles of ql, the two high bits of qh
// shifted up by 4), then looks each code's level up in a table; measured
// about 25% faster than assembling the codes byte by byte.
func dotQ6K(row []byte, x []float32) float32 {
	const nib, two = 0x0f0f0f0f, 0x03030303
	var sum float64
	for i := 0; i < len(x)/kValues; i++ {
		b := (*[q6KBytes]byte)(row[i*q6KBytes:])
		sc := (*[16]byte)(b[q6KScales:])
		var acc float32
		for n := range 2 {
			ql := (*[64]byte)(b[64*n:])
			qh := (*[32]byte)(b[q6KQh+32*n:])
			xs := (*[128]float32)(x[i*kValues+128*n:])
			// Each 16-value run of l shares one scale per quarter.
			for r := 0; r < 32; r += 16 {
				var s1, s2, s3, s4 float32
				for l := r; l < r+16; l += 4 {
					w1 := binary.LittleEndian.Uint32(ql[l:])
					w2 := binary.LittleEndian.Uint32(ql[l+32:])
					h := binary.LittleEndian.Uint32(qh[l:])
					s1 += dot4Q6K(w1&nib|(h&two)<<4, (*[4]float32)(xs[l:]))
					s2 += dot4Q6K(w2&nib|(h>>2&two)<<4, (*[4]float32)(xs[l+32:]))
					s3 += dot4Q6K(w1>>4&nib|(h>>4&two)<<4, (*[4]float32)(xs[l+64:]))
					s4 += dot4Q6K(w2>>4&nib|(h>>6&two)<<4, (*[4]float32)(xs[l+96:]))
				}
				s := 8*n + r/16
				acc += float32(int8(sc[s]))*s1 + float32(int8(sc[s+2]))*s2 +
					float32(int8(sc[s+4]))*s3 + float32(int8(sc[s+6]))*s4
			}
		}
		sum += float64(loadHalf(b[q6KD:]) * acc)
	}
	return float32(sum)
}

// dot4Q6K is Σ level(code)·x over the four 6-bit codes held one per byte of c.
func dot4Q6K(c uint32, x *[4]float32) float32 {
	return q6KLevels[c&63]*x[0] + q6KLevels[c>>8&63]*x[1] + q6KLevels[c>>16&63]*x[2] + q6KLevels[c>>24&63]*x[3]
}

// quantizeQ6K fits each 16-value sub-block's scale by least squares
// (fitSymmetric over -32..31), maps the largest-magnitude one to -128 (d =
// -max/128, d in f16) and rounds the others to int8 against d, then rounds
// every value to its level under the scale as stored.
func quantizeQ6K(dst []byte, src []float32) error {
	for i := 0; i < len(src)/kValues; i++ {
		b := (*[q6KBytes]byte)(dst[i*q6KBytes:])
		x := (*[kValues]float32)(src[i*kValues:])
		var s [16]float32
		var maxS float32
		for j := range s {
			s[j] = fitSymmetric(x[16*j:16*(j+1)], -32, 31)
			if abs32(s[j]) > abs32(maxS) {
				maxS = s[j]
			}
		}
		bits, d, err := superScaleHalf(-maxS / 128)
		if err != nil {
			return err
		}
		binary.LittleEndian.PutUint16(b[q6KD:], bits)
		id := inverse(d)
		var q [kValues]uint8
		for j := range s {
			sc := int8(roundLevel(float64(s[j])*id, -128, 127))
			b[q6KScales+j] = byte(sc)
			ia := inverse(d * float32(sc))
			for l := range 16 {
				q[16*j+l] = uint8(roundLevel(float64(x[16*j+l])*ia, -32, 31) + 32)
			}
		}
		for n := range 2 {
			for l := range 32 {
				q1, q2, q3, q4 := q[128*n+l], q[128*n+l+32], q[128*n+l+64], q[128*n+l+96]
				b[64*n+l] = q1&15 | q3&15<<4
				b[64*n+l+32] = q2&15 | q4&15<<4
				b[q6KQh+32*n+l] = q1>>4 | q2>>4<<2 | q3>>4<<4 | q4>>4<<6
			}
		}
	}
	return nil
}
