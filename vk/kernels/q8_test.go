package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/vkinfer/vkinfer/quant"
	"github.com/vkinfer/vkinfer/vk"
)

// q8Values decodes n columns of K activations in the q8 layout into their
// values q*d, checking the layout's promises on the way: every q in
// [-127, 127], and each block's scale d = max|x|/127 of the x it came from
// with |x - q*d| <= d/2 (round to nearest), up to f32 rounding of d and x/d.
func q8Values(t *testing.T, raw []byte, x []float32, n, K int) []float32 {
	t.Helper()
	blocks := n * K / 32
	got, err := DecodeQ8(raw, n, K)
	if err != nil {
		t.Fatal(err)
	}
	bad := 0
	for b := 0; b < blocks; b++ {
		d := math.Float32frombits(binary.LittleEndian.Uint32(raw[n*K+4*b:]))
		amax := 0.0
		for _, v := range x[32*b : 32*b+32] {
			amax = max(amax, math.Abs(float64(v)))
		}
		if want := amax / 127; math.Abs(float64(d)-want) > 2*eps32*want {
			t.Errorf("block %d: scale %g, want max|x|/127 = %g", b, d, want)
		}
		for i := 32 * b; i < 32*b+32; i++ {
			q := int8(raw[i])
			// The x/d the shader rounds is within a few ulps of exact.
			if q == -128 || math.Abs(float64(x[i])-float64(got[i])) > float64(d)*(0.5+1e-5) {
				if bad++; bad <= 5 {
					t.Errorf("x[%d] = %g rounded to %d × %g", i, x[i], q, d)
				}
			}
		}
	}
	return got
}

// TestQuantizeQ8 rounds activations with awkward magnitudes (zeros,
// a block of zeros, huge and tiny values) and checks every block.
func TestQuantizeQ8(t *testing.T) {
	k := setup(t)
	for _, c := range []struct{ n, K int }{{1, 32}, {3, 4096}, {8, 14336}, {5, 96}} {
		t.Run(fmt.Sprintf("%dx%d", c.n, c.K), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(c.n), uint64(c.K)))
			x := normals(r, c.n*c.K, 1)
			for i := range x {
				switch i % 97 {
				case 3:
					x[i] *= 1e6
				case 5:
					x[i] *= 1e-30
				case 7:
					x[i] = 0
				}
			}
			clear(x[len(x)-32:]) // an all-zero block: scale 0, quants 0
			raw := quantizeOnGPU(t, k, x, c.n, c.K)
			q8Values(t, raw, x, c.n, c.K)
		})
	}
	if err := k.QuantizeQ8(nil, whole(kern.dummy), whole(kern.dummy), 1, 48); err == nil {
		t.Error("K = 48 (not a multiple of 32) was accepted")
	}
}

// quantizeOnGPU runs QuantizeQ8 on x and returns the q8 bytes.
func quantizeOnGPU(t *testing.T, k *Kernels, x []float32, n, K int) []byte {
	t.Helper()
	xb := floatBuffer(t, x)
	qb := buffer(t, Q8Bytes(n, K), nil)
	run(t, func(s *vk.Sequence) error { return k.QuantizeQ8(s, whole(qb), whole(xb), n, K) })
	return readBytes(t, qb)
}

// readBytes returns the contents of b.
func readBytes(t *testing.T, b *vk.Buffer) []byte {
	t.Helper()
	raw := make([]byte, b.Size())
	if err := b.Read(0, raw); err != nil {
		t.Fatal(err)
	}
	return raw
}

// TestGatedQ8 checks decode's gated activations fused with rounding: the
// f32 result against float64, its 8-bit copy against the f32 result.
func TestGatedQ8(t *testing.T) {
	k := setup(t)
	for _, g := range []GLU{SwiGLU, GeGLU} {
		for _, c := range []struct{ n, K int }{{1, 14336}, {3, 96}, {8, 32}, {2, 10240}} {
			t.Run(fmt.Sprintf("%s/%dx%d", g, c.n, c.K), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(c.n), uint64(c.K)))
				gate, up := normals(r, c.n*c.K, 4), normals(r, c.n*c.K, 1)
				gb, ub := floatBuffer(t, gate), floatBuffer(t, up)
				ob, qb := buffer(t, f32(c.n*c.K), nil), buffer(t, Q8Bytes(c.n, c.K), nil)
				run(t, func(s *vk.Sequence) error {
					return k.GatedQ8(s, g, whole(qb), whole(ob), whole(gb), whole(ub), c.n, c.K)
				})
				got := read(t, ob, 0, c.n*c.K)
				want, scale := make([]float64, len(got)), make([]float64, len(got))
				for i, x := range gate {
					act, y := gluRef(g, float64(x))
					want[i] = act * float64(up[i])
					// Floored where e^-y overflows f32 and the result
					// flushes to 0 instead of ~1e-40.
					scale[i] = max(math.Abs(want[i])*max(1, math.Abs(y)/10), 1e-30)
				}
				compare(t, "out", got, want, scale, 1e-5) // exp and the quotient, a few ulps each
				q8Values(t, readBytes(t, qb), got, c.n, c.K)
			})
		}
	}
}

// refusesQ8 checks, on a device without integer dot products, that an
// 8-bit-activation product refused to record with an error naming the
// feature: there is nothing else to test there (CI fails on a skipped
// test, so the caller returns).
func refusesQ8(t *testing.T, err error) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), "integer dot product") {
		t.Fatalf("a device without integer dot products: %v, want a refusal that names the feature", err)
	}
	t.Logf("the device lacks integer dot products; the kernel refuses: %v", err)
}

// TestMatVecQ8 checks the integer-dot matrix-vector kernel on every weight
// type it takes, awkward row counts, K up to 14336, 1 to 23 columns, several
// shapes and the residual form, against the float64 product of the exact
// weights with the activations as rounded on the GPU (their rounding is
// TestQuantizeQ8's).
func TestMatVecQ8(t *testing.T) {
	k := setup(t)
	if !k.info.IntegerDot {
		refusesQ8(t, k.MatVecQ8With(nil, whole(kern.dummy), whole(kern.dummy), whole(kern.dummy), nil, quant.Q4_K, 1, 1, 256, k.MatVec))
		return
	}
	rows := []int{1, 7, 255, 257, 1025}
	shapes := []MatVecShape{{64, 2, 1, 0}, {16, 1, 4, 0}, {32, 3, 2, 0}, {64, 4, 8, 0}, k.MatVec, {}}
	i := 0
	for _, qt := range WeightTypes {
		if !HasQ8(qt) {
			continue
		}
		for j, K := range kFor(qt) {
			c := matCase{rows: rows[(j+i)%len(rows)], K: K, n: matVecCols[i%len(matVecCols)]}
			sh := shapes[i%len(shapes)]
			if sh == (MatVecShape{}) {
				sh = k.MatVecQ8For(c.rows, c.K) // the engine's choice
			}
			resid := i%3 == 1
			i++
			t.Run(fmt.Sprintf("%s/%dx%d/n%d/%s/resid=%v", qt, c.rows, c.K, c.n, sh, resid), func(t *testing.T) {
				testQ8Product(t, k, qt, c, resid, func(s *vk.Sequence, dst, w, xq vk.Binding, r *vk.Binding) error {
					return k.MatVecQ8With(s, dst, w, xq, r, qt, c.n, c.rows, c.K, sh)
				})
			})
		}
	}
	if err := k.MatVecQ8With(nil, whole(kern.dummy), whole(kern.dummy), whole(kern.dummy), nil, quant.F16, 1, 1, 32, k.MatVec); err == nil {
		t.Error("F16 weights were accepted")
	}
}

// TestMatMulQ8 checks the tiled product on 8-bit activations for every
// weight type it takes, awkward row and column counts and every tile
// shape: the defaults, then each candidate of Q8Tiles and the short
// batches' tiles that fits the device, against the float64 product of the exact weights with the
// activations as rounded on the GPU.
func TestMatMulQ8(t *testing.T) {
	k := setup(t)
	if !k.info.IntegerDot {
		refusesQ8(t, k.MatMulQ8(nil, whole(kern.dummy), whole(kern.dummy), whole(kern.dummy), quant.Q4_K, 1, 1, 256, k.TileQ8))
		return
	}
	tiles := append([]Tile{k.TileQ8, {BM: 16, BN: 16, TM: 2, TN: 2}, {BM: 13, BN: 13, TM: 1, TN: 1},
		{BM: 8, BN: 32, TM: 1, TN: 4, KB: 32}}, Q8Tiles...)
	for _, nt := range narrowQ8Tiles { // the short batches' tiles (TileQ8For)
		if !slices.Contains(tiles, nt.tile) {
			tiles = append(tiles, nt.tile)
		}
	}
	i := 0
	for _, qt := range WeightTypes {
		if !HasQ8(qt) {
			continue
		}
		for _, c := range tiledCases {
			c.K = kFor(qt)[c.K]
			tile := tiles[i%len(tiles)]
			i++
			for tries := 0; tile.Q8SharedBytes(qt) > k.info.SharedMemory || tile.Invocations() > k.info.MaxWorkgroupInvocations; tries++ {
				if tries == len(tiles) {
					t.Fatalf("no 8-bit tile fits %d bytes of shared memory", k.info.SharedMemory)
				}
				tile = tiles[i%len(tiles)] // does not fit this device: the next
				i++
			}
			t.Run(fmt.Sprintf("%s/%dx%d/n%d/%dx%d/%dx%d/k%d", qt, c.rows, c.K, c.n, tile.BM, tile.BN, tile.TM, tile.TN, tile.q8Chunk(qt)), func(t *testing.T) {
				testQ8Product(t, k, qt, c, false, func(s *vk.Sequence, dst, w, xq vk.Binding, _ *vk.Binding) error {
					return k.MatMulQ8(s, dst, w, xq, qt, c.n, c.rows, c.K, tile)
				})
			})
		}
	}
	if err := k.MatMulQ8(nil, whole(kern.dummy), whole(kern.dummy), whole(kern.dummy), quant.F32, 1, 1, 32, k.TileQ8); err == nil {
		t.Error("F32 weights were accepted")
	}
}

// testQ8Product runs rec (a product on 8-bit activations) on case c and
// compares dst with the float64 product of the exact weights and the
// activations as QuantizeQ8 rounded them; with resid, rec gets dst as the
// residual too (in place, as the engine uses it) and dst starts with its
// values.
func testQ8Product(t *testing.T, k *Kernels, qt quant.Type, c matCase, resid bool,
	rec func(s *vk.Sequence, dst, w, xq vk.Binding, r *vk.Binding) error) {
	t.Helper()
	r := rand.New(rand.NewPCG(uint64(c.rows), uint64(c.K*10+c.n)))
	raw, deq := quantized(t, r, qt, c.rows, c.K)
	x := normals(r, c.n*c.K, 1)
	xq := q8Values(t, quantizeOnGPU(t, k, x, c.n, c.K), x, c.n, c.K)
	want, scale := matRef(deq, xq, c.n, c.rows, c.K)
	w := weightsAt(t, raw, 256)
	xb := floatBuffer(t, x)
	qb := buffer(t, Q8Bytes(c.n, c.K), nil)
	res := normals(r, c.n*c.rows, 10)
	db := floatBuffer(t, res)
	var rb *vk.Binding
	if resid {
		rb = &vk.Binding{Buf: db}
		for i := range want {
			want[i] += float64(res[i])
			scale[i] += math.Abs(float64(res[i]))
		}
	}
	run(t, func(s *vk.Sequence) error {
		if err := k.QuantizeQ8(s, whole(qb), whole(xb), c.n, c.K); err != nil {
			return err
		}
		s.Barrier()
		return rec(s, whole(db), w, whole(qb), rb)
	})
	compare(t, "dst", read(t, db, 0, c.n*c.rows), want, scale, dotTol(c.K))
}
