package quant

import "encoding/binary"

// Q5_K: super-blocks of 256 values in 176 bytes:
//
//	header     bytes 0..15   d, dmin, packed 6-bit scales/mins (kscales.go)
//	qh [32]    bytes 16..47  5th bit: value v's is bit v/32 of qh[v%32]
//	qs [128]   bytes 48..175 low 4 bits, laid out as Q4_K's qs
//
// Levels are 0..31; x = d·scale_j·q − dmin·min_j.
const (
	q5KBytes = 176
	q5KQh    = kHeader
	q5KQs    = kHeader + 32
)

func dequantizeQ5K(src []byte, dst []float32) {
	for i := 0; i < len(dst)/kValues; i++ {
		b := (*[q5KBytes]byte)(src[i*q5KBytes:])
		y := (*[kValues]float32)(dst[i*kValues:])
		var a, m [8]float32
		kHeaderValues((*[kHeader]byte)(b[:]), &a, &m)
		qh := (*[32]byte)(b[q5KQh:])
		for g := range 4 {
			qs := (*[32]byte)(b[q5KQs+32*g:])
			lo := (*[32]float32)(y[64*g:])
			hi := (*[32]float32)(y[64*g+32:])
			for l, q := range qs {
				lo[l] = a[2*g]*kLevels[(q&15|(qh[l]>>(2*g)&1)<<4)&31] - m[2*g]
				hi[l] = a[2*g+1]*kLevels[(q>>4|(qh[l]>>(2*g+1)&1)<<4)&31] - m[2*g+1]
			}
		}
	}
}

// dotQ5K works as dotQ4K, with 32-entry tables of the dequantized values;
// as dotQ6K does, it assembles the 5-bit codes of four values at a time in a
// 32-bit word.
func dotQ5K(row []byte, x []float32) float32 {
	const nib, one = 0x0f0f0f0f, 0x01010101
	var sum float64
	var a, m [8]float32
	for i := 0; i < len(x)/kValues; i++ {
		b := (*[q5KBytes]byte)(row[i*q5KBytes:])
		xs := (*[kValues]float32)(x[i*kValues:])
		kHeaderValues((*[kHeader]byte)(b[:]), &a, &m)
		qh := (*[32]byte)(b[q5KQh:])
		var acc float32
		for g := range 4 {
			var tl, th [32]float32
			for k := range tl {
				tl[k] = a[2*g]*kLevels[k] - m[2*g]
				th[k] = a[2*g+1]*kLevels[k] - m[2*g+1]
			}
			qs := (*[32]byte)(b[q5KQs+32*g:])
			lo := (*[32]float32)(xs[64*g:])
			hi := (*[32]float32)(xs[64*g+32:])
			var s0, s1 float32
			for l := 0; l < 32; l += 4 {
				w := binary.LittleEndian.Uint32(qs[l:])
				h := binary.LittleEndian.Uint32(qh[l:]) >> (2 * g)
				s0 += dot4Q5K(&tl, w&nib|(h&one)<<4, (*[4]float32)(lo[l:]))
				s1 += dot4Q5K(&th, w>>4&nib|(h>>1&one)<<4, (*[4]float32)(hi[l:]))
			}
			acc += s0 + s1
		}
		sum += float64(acc)
	}
	return float32(sum)
}

// dot4Q5K is Σ t[code]·x over the four 5-bit codes held one per byte of c.
func dot4Q5K(t *[32]float32, c uint32, x *[4]float32) float32 {
	return t[c&31]*x[0] + t[c>>8&31]*x[1] + t[c>>16&31]*x[2] + t[c>>24&31]*x[3]
}

func quantizeQ5K(dst []byte, src []float32) error {
	var q [kValues]uint8
	for i := 0; i < len(src)/kValues; i++ {
		b := (*[q5KBytes]byte)(dst[i*q5KBytes:])
		if err := quantizeKSuper((*[kValues]float32)(src[i*kValues:]), 31, (*[kHeader]byte)(b[:]), &q); err != nil {
			return err
		}
		qh := (*[32]byte)(b[q5KQh:])
		for v, l := range q {
			qh[v%32] |= l >> 4 << (v / 32)
		}
		for g := range 4 {
			for l := range 32 {
				b[q5KQs+32*g+l] = q[64*g+l]&15 | q[64*g+32+l]&15<<4
			}
		}
	}
	return nil
}
