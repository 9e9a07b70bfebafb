package quant

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/x448/float16"
)

// refValue is a deliberately plain reader: it finds value v of the block b
// (a single block of type t) by the layout rules alone, one value at a time,
// with x448/float16 for the f16 fields. It shares no code with the package's
// block loops.
func refValue(t Type, b []byte, v int) float64 {
	half := func(off int) float64 { return float64(float16.Frombits(binary.LittleEndian.Uint16(b[off:])).Float32()) }
	// ggml's get_scale_min_k4.
	scaleMin := func(j int) (sc, mn float64) {
		q := b[4:16]
		if j < 4 {
			return float64(q[j] & 63), float64(q[j+4] & 63)
		}
		return float64(q[j+4]&0xf | (q[j-4]>>6)<<4), float64(q[j+4]>>4 | (q[j]>>6)<<4)
	}
	switch t {
	case Q8_0:
		return half(0) * float64(int8(b[2+v]))
	case Q4_0:
		var q byte
		if v < 16 {
			q = b[2+v] & 0xf
		} else {
			q = b[2+v-16] >> 4
		}
		return half(0) * float64(int(q)-8)
	case Q4_K, Q5_K:
		qs := 16
		if t == Q5_K {
			qs = 48
		}
		g, r := v/64, v%64
		q := b[qs+32*g+r%32]
		if r < 32 {
			q &= 0xf
		} else {
			q >>= 4
		}
		if t == Q5_K && b[16+v%32]>>(v/32)&1 == 1 {
			q += 16
		}
		sc, mn := scaleMin(v / 32)
		return half(0)*sc*float64(q) - half(2)*mn
	case Q6_K:
		n, r := v/128, v%128
		k, l := r/32, r%32
		lowByte := b[64*n+l+32*(k&1)]
		low := lowByte & 0xf
		if k >= 2 {
			low = lowByte >> 4
		}
		high := b[128+32*n+l] >> (2 * k) & 3
		q := int(low|high<<4) - 32
		return half(208) * float64(int8(b[192+v/16])) * float64(q)
	}
	panic("refValue: no reference for " + t.String())
}

// blockTypes are the supported formats with more than one value per block.
var blockTypes = []Type{Q8_0, Q4_0, Q4_K, Q5_K, Q6_K}

// randomRow returns nb random blocks of t: random bytes, with every f16
// scale field replaced by a random finite scale (±2^-10..2^0) so that no
// block is NaN; plain float rows get random finite values.
func randomRow(r *rand.Rand, t Type, nb int) []byte {
	n, _ := t.RowBytes(nb * t.BlockSize())
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	scale := func(p []byte) {
		binary.LittleEndian.PutUint16(p, halfBits(float32(math.Ldexp(1+r.Float64(), -r.IntN(11)))*float32(1-2*r.IntN(2))))
	}
	bb := t.BlockBytes()
	for i := range nb {
		blk := b[i*bb : (i+1)*bb]
		switch t {
		case F32:
			binary.LittleEndian.PutUint32(blk, math.Float32bits(float32(r.NormFloat64())))
		case F16:
			scale(blk)
		case BF16:
			binary.LittleEndian.PutUint16(blk, floatToBF16(float32(r.NormFloat64())))
		case Q8_0, Q4_0:
			scale(blk[0:])
		case Q4_K, Q5_K:
			scale(blk[0:])
			scale(blk[2:])
		case Q6_K:
			scale(blk[208:])
		}
	}
	return b
}

// TestDequantizeMatchesReference decodes random blocks of every quantized
// format and compares each value with refValue. The two may round
// differently only where a compiler fuses a multiply-add, so the tolerance
// is a few float32 ulps of the terms.
func TestDequantizeMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	for _, typ := range blockTypes {
		const nb = 200
		row := randomRow(r, typ, nb)
		got := decode(t, typ, row, nb*typ.BlockSize())
		bb, bs := typ.BlockBytes(), typ.BlockSize()
		for i := range nb {
			blk := row[i*bb : (i+1)*bb]
			for v := range bs {
				want := refValue(typ, blk, v)
				if d := math.Abs(float64(got[i*bs+v]) - want); d > 1e-6*math.Abs(want)+1e-6 {
					t.Fatalf("%v block %d value %d = %g, reference %g", typ, i, v, got[i*bs+v], want)
				}
			}
		}
	}
}

// TestDotMatchesDequantize checks Dot against Σ Dequantize·x for every
// supported format at awkward lengths, in blocks (a plain float "block" is
// one value, so 1, 7, 33, 255, 257 values also cover its 32-value runs and
// the tail after them).
func TestDotMatchesDequantize(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 9))
	for _, typ := range []Type{F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K} {
		for _, nb := range []int{1, 2, 7, 8, 31, 33, 255, 257} {
			row := randomRow(r, typ, nb)
			n := nb * typ.BlockSize()
			w := decode(t, typ, row, n)
			x := gaussian(uint64(nb), n)
			checkDot(t, typ, row, w, x)
		}
	}
}
