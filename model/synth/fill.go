package synth

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/vkinfer/vkinfer/quant"
	"github.com/x448/float16"
)

// dist is the intended distribution of a tensor's values.
type dist struct{ mean, std float64 }

// distOf gives matrices a standard deviation of 1/sqrt(fan_in) (ne0 is the
// input dimension), so that every projection of an RMS-normed vector has
// values of about unit size and the residual stream grows only like the
// square root of the depth; norm weights are about 1 and biases small.
func distOf(t tensorSpec) dist {
	switch t.kind {
	case kindNorm:
		return dist{mean: 1, std: 0.02}
	case kindBias:
		return dist{std: 0.02}
	default:
		return dist{std: 1 / math.Sqrt(float64(t.shape[0]))}
	}
}

// chunkValues is how many values one PRNG stream fills. Chunks, not
// workers, carry the seeds, so the bytes do not depend on the core count.
const chunkValues = 1 << 18

// filler writes whole blocks of one type into dst (a multiple of the
// block size) with values drawn from d.
type filler func(r *rng, dst []byte, d dist)

// fillers generates quantized blocks directly from the PRNG rather than
// quantizing random floats: an 8B model is billions of values, and this is
// what lets it be written in seconds. Quantized types only hold matrices,
// whose mean is 0.
var fillers = map[quant.Type]filler{
	quant.F32:  fillF32,
	quant.F16:  fillF16,
	quant.Q8_0: fillQ8_0,
	quant.Q4_K: fillQ4_K,
	quant.Q6_K: fillQ6_K,
}

// tensorData generates the bytes of tensor t as type typ, in parallel
// chunks, reporting each finished chunk's bytes to done.
func tensorData(t tensorSpec, typ quant.Type, seed uint64, done func(n uint64)) ([]byte, error) {
	if t.values != nil {
		if typ != quant.F32 || uint64(len(t.values)) != t.shape[0] || len(t.shape) != 1 {
			return nil, fmt.Errorf("%s: %d fixed values for a %s tensor of shape %v", t.name, len(t.values), typ, t.shape)
		}
		buf := make([]byte, 4*len(t.values))
		for i, v := range t.values {
			binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(v))
		}
		done(uint64(len(buf)))
		return buf, nil
	}
	fill, ok := fillers[typ]
	if !ok {
		return nil, fmt.Errorf("no generator for type %s", typ)
	}
	size, err := tensorBytes(t, typ)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, size)
	chunkBytes := chunkValues / typ.BlockSize() * typ.BlockBytes()
	chunks := (len(buf) + chunkBytes - 1) / chunkBytes
	// Each tensor's streams derive from its name, so a tensor's values do
	// not depend on which tensors come before it.
	h := fnv.New64a()
	h.Write([]byte(t.name))
	tensorSeed := mix(seed, h.Sum64())
	d := distOf(t)

	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), chunks) {
		wg.Go(func() {
			for {
				c := int(next.Add(1) - 1)
				if c >= chunks {
					return
				}
				part := buf[c*chunkBytes : min(len(buf), (c+1)*chunkBytes)]
				r := newRNG(tensorSeed, uint64(c))
				fill(r, part, d)
				done(uint64(len(part)))
			}
		})
	}
	wg.Wait()
	return buf, nil
}

// tensorBytes is the size of t stored as typ.
func tensorBytes(t tensorSpec, typ quant.Type) (uint64, error) {
	row, err := typ.RowBytes(int(t.shape[0]))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", t.name, err)
	}
	n := uint64(row)
	for _, d := range t.shape[1:] {
		n *= d
	}
	return n, nil
}

// rng is a PCG stream with the few draws the fillers need.
type rng struct{ rand.PCG }

func newRNG(seed, stream uint64) *rng {
	return &rng{*rand.NewPCG(seed, mix(seed, stream))}
}

// fill writes random bytes over b.
func (r *rng) fill(b []byte) {
	for len(b) >= 8 {
		binary.LittleEndian.PutUint64(b, r.Uint64())
		b = b[8:]
	}
	for i, x := 0, r.Uint64(); i < len(b); i, x = i+1, x>>8 {
		b[i] = byte(x)
	}
}

// float returns a uniform value in [0, 1).
func (r *rng) float() float64 { return float64(r.Uint64()>>11) * 0x1p-53 }

// intn returns a uniform value in [0, n).
func (r *rng) intn(n int) int { return int(r.Uint64() % uint64(n)) }

// uniform draws from d with a uniform distribution: bounded, so no outlier
// weight can blow an activation up.
func (r *rng) uniform(d dist) float64 {
	return d.mean + d.std*math.Sqrt(3)*(2*r.float()-1)
}

// jitter varies a block's scale d within [0.5, 1.5)·d, so that kernels that
// read the wrong block's scale give visibly wrong results.
func (r *rng) jitter() float64 { return 0.5 + r.float() }

// jitterRMS is the root mean square of jitter(): sqrt(∫ x² dx over [0.5, 1.5)).
var jitterRMS = math.Sqrt((1.5*1.5*1.5 - 0.5*0.5*0.5) / 3)

// mix hashes two words into a seed (splitmix64's finalizer over a ^ b·φ).
func mix(a, b uint64) uint64 {
	z := a ^ (b * 0x9e3779b97f4a7c15)
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// rmsInts is the root mean square of the integers lo..hi, each equally
// likely: the spread a random quant or scale in that range contributes.
func rmsInts(lo, hi int) float64 {
	var s float64
	for k := lo; k <= hi; k++ {
		s += float64(k * k)
	}
	return math.Sqrt(s / float64(hi-lo+1))
}

func f16(x float64) float16.Float16 { return float16.Fromfloat32(float32(x)) }

func fillF32(r *rng, dst []byte, d dist) {
	for i := 0; i < len(dst); i += 4 {
		binary.LittleEndian.PutUint32(dst[i:], math.Float32bits(float32(r.uniform(d))))
	}
}

func fillF16(r *rng, dst []byte, d dist) {
	for i := 0; i < len(dst); i += 2 {
		binary.LittleEndian.PutUint16(dst[i:], f16(r.uniform(d)).Bits())
	}
}

// Q8_0: x = d·q with q a random int8. -128 (which llama.cpp's quantizer
// never writes) is folded to 0, so q is symmetric and blocks are centred:
// of the 256 byte values, 255 are spread over -127..127 and one more is 0.
var q8Unit = rmsInts(-127, 127) * math.Sqrt(255.0/256) * jitterRMS

func fillQ8_0(r *rng, dst []byte, d dist) {
	for b := dst; len(b) > 0; b = b[quant.Q8_0.BlockBytes():] {
		binary.LittleEndian.PutUint16(b, f16(d.std/q8Unit*r.jitter()).Bits())
		qs := b[2:quant.Q8_0.BlockBytes()]
		r.fill(qs)
		for i, q := range qs {
			if q == 0x80 {
				qs[i] = 0
			}
		}
	}
}

// Q4_K sub-block scales and mins are 6-bit; q is a random nibble.
const (
	q4ScaleMin = 32 // scales in [32, 63]: large enough that d·sc·q is not coarse
	q4MinStep  = 8  // dmin = 8·d, so the centring mins m ≈ 7.5·sc/8 fit in 6 bits
)

// q4Unit: x = d·sc·q − dmin·m with m chosen to centre the sub-block, so a
// value's spread is d·sc times a nibble's standard deviation, sqrt((16²−1)/12).
var q4Unit = math.Sqrt((16*16-1)/12.0) * rmsInts(q4ScaleMin, 63) * jitterRMS

func fillQ4_K(r *rng, dst []byte, d dist) {
	for b := dst; len(b) > 0; b = b[quant.Q4_K.BlockBytes():] {
		dq := f16(d.std / q4Unit * r.jitter())
		dmin := f16(q4MinStep * float64(dq.Float32()))
		// m is rounded, so a sub-block is centred to within dmin/2 ≈ 4·d,
		// small next to its spread d·sc·4.6 ≥ 147·d.
		ratio := 0.0
		if dmin.Float32() > 0 {
			ratio = float64(dq.Float32()) / float64(dmin.Float32())
		}
		var sc, m [8]uint8
		for j := range sc {
			sc[j] = uint8(q4ScaleMin + r.intn(64-q4ScaleMin))
			m[j] = uint8(min(63, math.Round(7.5*float64(sc[j])*ratio)))
		}
		binary.LittleEndian.PutUint16(b[0:], dq.Bits())
		binary.LittleEndian.PutUint16(b[2:], dmin.Bits())
		packScaleMin(b[4:16], sc, m)
		r.fill(b[16:quant.Q4_K.BlockBytes()])
	}
}

// packScaleMin stores eight 6-bit scale/min pairs in 12 bytes the way
// ggml's quantize_row_q4_K does (read back by get_scale_min_k4): pairs 0–3
// take the low 6 bits of bytes 0–3 (scales) and 4–7 (mins); pairs 4–7 keep
// their low nibbles in bytes 8–11 and their top 2 bits in the spare high
// bits of bytes 0–7.
func packScaleMin(dst []byte, sc, m [8]uint8) {
	for j := range 4 {
		dst[j] = sc[j] | sc[j+4]>>4<<6
		dst[j+4] = m[j] | m[j+4]>>4<<6
		dst[j+8] = sc[j+4]&0xF | m[j+4]&0xF<<4
	}
}

// Q6_K: x = d·sc·(q−32), q a random 6-bit value, sc an int8 of random sign
// and magnitude in [32, 127], so sub-blocks are centred on average.
const q6ScaleMin = 32

var q6Unit = rmsInts(-32, 31) * rmsInts(q6ScaleMin, 127) * jitterRMS

func fillQ6_K(r *rng, dst []byte, d dist) {
	for b := dst; len(b) > 0; b = b[quant.Q6_K.BlockBytes():] {
		r.fill(b[:192]) // ql and qh: the low 4 and high 2 bits of each q
		for j := range 16 {
			s := int8(q6ScaleMin + r.intn(128-q6ScaleMin))
			if r.Uint64()&1 != 0 {
				s = -s
			}
			b[192+j] = byte(s)
		}
		binary.LittleEndian.PutUint16(b[208:], f16(d.std/q6Unit*r.jitter()).Bits())
	}
}
