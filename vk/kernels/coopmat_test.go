package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/vkinfer/vkinfer/coopmat"
	"github.com/vkinfer/vkinfer/internal/vktest"
	"github.com/vkinfer/vkinfer/quant"
	"github.com/vkinfer/vkinfer/vk"
	"github.com/x448/float16"
)

// f16Rows decodes QuantizeF16's layout into the values x/s it holds and the
// row scales s.
func f16Rows(raw []byte, n, K int) (vals []float32, scales []float32) {
	vals, scales = make([]float32, n*K), make([]float32, n)
	for i := range vals {
		vals[i] = float16.Frombits(binary.LittleEndian.Uint16(raw[2*i:])).Float32()
	}
	for r := range scales {
		scales[r] = math.Float32frombits(binary.LittleEndian.Uint32(raw[2*n*K+4*r:]))
	}
	return vals, scales
}

// TestQuantizeF16 rounds rows with awkward magnitudes (beyond f16's range,
// tiny, zero) and checks each row's scale (the least power of two that
// brings the row within 32768) and each value (x/s to f16's precision).
func TestQuantizeF16(t *testing.T) {
	k := setup(t)
	for _, c := range []struct{ n, K int }{{1, 8}, {3, 4096}, {9, 14336}, {5, 200}} {
		t.Run(fmt.Sprintf("%dx%d", c.n, c.K), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(c.n), uint64(c.K)))
			x := normals(r, c.n*c.K, 1)
			for i := range x {
				switch {
				case i%97 == 3 && i/c.K%2 == 1:
					x[i] *= 1e6 // odd rows go beyond f16's range
				case i%97 == 5:
					x[i] *= 1e-30
				case i%97 == 7:
					x[i] = 0
				}
			}
			if c.n > 2 {
				clear(x[2*c.K : 3*c.K]) // an all-zero row: scale 1
			}
			xb := floatBuffer(t, x)
			hb := buffer(t, F16Bytes(c.n, c.K), nil)
			run(t, func(s *vk.Sequence) error { return k.QuantizeF16(s, whole(hb), whole(xb), c.n, c.K) })
			vals, scales := f16Rows(readBytes(t, hb), c.n, c.K)
			for row := 0; row < c.n; row++ {
				amax := 0.0
				for _, v := range x[row*c.K : (row+1)*c.K] {
					amax = max(amax, math.Abs(float64(v)))
				}
				s := float64(scales[row])
				if frac, _ := math.Frexp(s); s < 1 || frac != 0.5 || amax/s > 32768 || (s > 1 && amax/(s/2) <= 32768) {
					t.Errorf("row %d: scale %g for max |x| %g", row, s, amax)
					continue
				}
				bad := 0
				for i := row * c.K; i < (row+1)*c.K; i++ {
					want := float64(x[i]) / s
					// f16: 11 significant bits (2^-10 relative allows
					// truncation); below 2^-14 an absolute 2^-24.
					if e := math.Abs(float64(vals[i]) - want); e > math.Abs(want)/1024+1.0/(1<<24) {
						if bad++; bad <= 3 {
							t.Errorf("x[%d] = %g: holds %g x %g", i, x[i], vals[i], s)
						}
					}
				}
			}
		})
	}
	b := whole(buffer(t, 1024, nil))
	if err := k.QuantizeF16(nil, b, b, 1, 12); err == nil {
		t.Error("K = 12 (not a multiple of 8) was accepted")
	}
}

// coopKernels returns Kernels whose cooperative-matrix products run on the
// emulation with fragments of shape sh (zero: the default), and, where the
// device has the extension and sh is zero, Kernels on its matrix units with
// the policy's shape.
func coopKernels(t *testing.T, sh coopmat.Shape) map[string]*Kernels {
	t.Helper()
	setup(t)
	out := map[string]*Kernels{}
	if why := vktest.CoopEmulationBroken(kern.dev); why != "" {
		t.Logf("emulation not checked: %s", why)
	} else {
		emu := New(kern.dev)
		emu.CoopEmulated = true
		emu.CoopMat.F16 = sh
		t.Cleanup(emu.Close)
		out["emulated"] = emu
	}
	if c := coopmat.Choose(CoopDevice(kern.info)); c.On() && sh == (coopmat.Shape{}) {
		real := New(kern.dev)
		real.CoopMat = c
		t.Cleanup(real.Close)
		out["device"] = real
	}
	return out
}

// testCoop runs MatMulCoop (with QuantizeF16 before it) on case c against
// the float64 product of the dequantized weights, with activations scaled
// by big in every third column.
func testCoop(t *testing.T, k *Kernels, qt quant.Type, c matCase, tile CoopTile, big float32) {
	t.Helper()
	t.Run(fmt.Sprintf("%s/%dx%d/n%d/%v", qt, c.rows, c.K, c.n, tile), func(t *testing.T) {
		r := rand.New(rand.NewPCG(uint64(c.rows), uint64(c.K*10+c.n)))
		raw, deq := quantized(t, r, qt, c.rows, c.K)
		x := normals(r, c.n*c.K, 1)
		if big != 1 {
			for i := range x {
				if i/c.K%3 == 1 {
					x[i] *= big
				}
			}
		}
		const wOff, dOff = 256, 64
		wb := buffer(t, wOff+int64(len(raw)), nil)
		if err := wb.Write(wOff, pad4(raw)); err != nil {
			t.Fatal(err)
		}
		xb := floatBuffer(t, x)
		hb := buffer(t, 16+F16Bytes(c.n, c.K), nil)
		db := buffer(t, dOff+f32(c.n*c.rows), nil)
		xh := vk.Binding{Buf: hb, Off: 16, Size: F16Bytes(c.n, c.K)}
		run(t, func(s *vk.Sequence) error {
			if err := k.QuantizeF16(s, xh, whole(xb), c.n, c.K); err != nil {
				return err
			}
			s.Barrier()
			return k.MatMulCoop(s, vk.Binding{Buf: db, Off: dOff, Size: f32(c.n * c.rows)},
				vk.Binding{Buf: wb, Off: wOff}, xh, qt, c.n, c.rows, c.K, tile)
		})
		want, scale := matRef(deq, x, c.n, c.rows, c.K)
		// Weights and activations are each rounded to f16 (2^-11, 2^-10
		// allowed for drivers that truncate); products and sums are f32.
		compare(t, "dst", read(t, db, dOff, c.n*c.rows), want, scale, dotTol(c.K)+2.0/1024)
	})
}

// TestMatMulCoop checks the cooperative-matrix product, on the emulation
// everywhere and on the device's matrix units where it has them, for every
// weight type it takes, at awkward row and column counts (1, 7, 255, 257,
// 1025) and K of several blocks, with several tiles, a fragment shape that
// is not square, and activations beyond f16's range.
func TestMatMulCoop(t *testing.T) {
	types := []quant.Type{quant.Q4_K, quant.Q5_K, quant.Q6_K, quant.Q8_0, quant.Q4_0, quant.F16, quant.BF16}
	cases := []matCase{
		{rows: 257, K: 768, n: 9},
		{rows: 7, K: 512, n: 255},
		{rows: 1025, K: 256, n: 7},
		{rows: 255, K: 1024, n: 257},
		{rows: 1, K: 768, n: 1025},
		{rows: 33, K: 4096, n: 1},
	}
	for name, k := range coopKernels(t, coopmat.Shape{}) {
		t.Run(name, func(t *testing.T) {
			tiles := []CoopTile{
				{BM: 16, BN: 16, WM: 16, WN: 16, BK: 256, KC: 16},
				{BM: 32, BN: 32, WM: 16, WN: 32, BK: 256, KC: 64},
				{BM: 16, BN: 48, WM: 16, WN: 16, BK: 512, KC: 64},
				{BM: 32, BN: 32, WM: 32, WN: 32, BK: 128, KC: 128},
			}
			i := 0
			for _, qt := range types {
				for _, c := range cases {
					tile := tiles[i%len(tiles)]
					if i%3 == 0 { // the engine's
						tile = k.CoopTileFor(qt)
					}
					testCoop(t, k, qt, c, tile, 1)
					i++
				}
			}
			// Steps of one run of pieces: 64 values of Q4_K, 128 of Q6_K.
			testCoop(t, k, quant.Q4_K, matCase{rows: 40, K: 768, n: 33}, CoopTile{BM: 32, BN: 32, WM: 16, WN: 16, BK: 64, KC: 64}, 1)
			testCoop(t, k, quant.Q5_K, matCase{rows: 17, K: 512, n: 16}, CoopTile{BM: 16, BN: 16, WM: 16, WN: 16, BK: 64, KC: 32}, 1)
			testCoop(t, k, quant.Q6_K, matCase{rows: 40, K: 768, n: 33}, CoopTile{BM: 32, BN: 32, WM: 16, WN: 32, BK: 128, KC: 64}, 1)
			testCoop(t, k, quant.Q4_K, matCase{rows: 64, K: 512, n: 40}, k.CoopTileFor(quant.Q4_K), 1e6)
			testCoop(t, k, quant.Q8_0, matCase{rows: 40, K: 96, n: 20}, CoopTile{BM: 16, BN: 32, WM: 16, WN: 16, BK: 32, KC: 32}, 1e6)
		})
	}
	// NVIDIA's 16x8x16 fragments: parts of the tile in other multiples.
	for name, k := range coopKernels(t, coopmat.Shape{M: 16, N: 8, K: 16}) {
		t.Run(name+"/16x8x16", func(t *testing.T) {
			testCoop(t, k, quant.Q6_K, matCase{rows: 255, K: 512, n: 23}, CoopTile{BM: 32, BN: 16, WM: 16, WN: 8, BK: 256, KC: 32}, 1)
			testCoop(t, k, quant.F16, matCase{rows: 9, K: 48, n: 100}, CoopTile{BM: 16, BN: 24, WM: 16, WN: 24, BK: 16, KC: 16}, 1)
		})
	}
}

func TestMatMulCoopRejects(t *testing.T) {
	setup(t)
	k := New(kern.dev) // checks only: nothing is run
	k.CoopEmulated = true
	t.Cleanup(k.Close)
	off := New(kern.dev)
	t.Cleanup(off.Close)
	b := buffer(t, 1<<20, nil)
	bind := whole(b)
	s := kern.dev.NewSequence()
	defer s.Free()
	tile := CoopTile{BM: 16, BN: 16, WM: 16, WN: 16, BK: 256, KC: 16}
	for _, c := range []struct {
		name string
		err  error
	}{
		{"f32 weights", k.MatMulCoop(s, bind, bind, bind, quant.F32, 9, 16, 256, tile)},
		{"off", off.MatMulCoop(s, bind, bind, bind, quant.Q4_K, 9, 16, 256, tile)},
		{"K not a multiple of 8", k.MatMulCoop(s, bind, bind, bind, quant.F16, 9, 16, 36, CoopTile{BM: 16, BN: 16, WM: 16, WN: 16, BK: 16, KC: 16})},
		{"partial fragments", k.MatMulCoop(s, bind, bind, bind, quant.Q4_K, 9, 16, 256, CoopTile{BM: 24, BN: 16, WM: 24, WN: 16, BK: 256, KC: 16})},
		{"partial run of Q4_K pieces", k.MatMulCoop(s, bind, bind, bind, quant.Q4_K, 9, 16, 256, CoopTile{BM: 16, BN: 16, WM: 16, WN: 16, BK: 32, KC: 16})},
		{"partial run of Q6_K pieces", k.MatMulCoop(s, bind, bind, bind, quant.Q6_K, 9, 16, 256, CoopTile{BM: 16, BN: 16, WM: 16, WN: 16, BK: 64, KC: 16})},
		{"chunk", k.MatMulCoop(s, bind, bind, bind, quant.Q4_K, 9, 16, 256, CoopTile{BM: 16, BN: 16, WM: 16, WN: 16, BK: 256, KC: 24})},
		{"shared memory", k.MatMulCoop(s, bind, bind, bind, quant.Q4_K, 9, 16, 256, CoopTile{BM: 256, BN: 16, WM: 16, WN: 16, BK: 256, KC: 16})},
		{"short activations", k.MatMulCoop(s, bind, bind, vk.Binding{Buf: b, Size: 64}, quant.Q4_K, 9, 16, 256, tile)},
	} {
		if c.err == nil {
			t.Errorf("%s: accepted", c.name)
		} else {
			t.Logf("%s: %v", c.name, c.err)
		}
	}
}
