package kernels

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
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

// TestQuantizeF16Blocked checks matvec_coopmat's layout against the row
// layout: every value and scale the same bits, each in its block of 16,
// and the columns past n left as they were (NaN here).
func TestQuantizeF16Blocked(t *testing.T) {
	k := setup(t)
	// 24 columns: 16x8 fragments in groups of 3 (MatVecCoopCols).
	for _, c := range []struct{ n, K, cols int }{{1, 16, 16}, {9, 4096, 16}, {17, 14336, 24}, {33, 80, 48}} {
		t.Run(fmt.Sprintf("%dx%d/%d", c.n, c.K, c.cols), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(c.n), uint64(c.K)))
			x := normals(r, c.n*c.K, 1)
			for i := range x {
				if i%89 == 3 && i/c.K%2 == 1 {
					x[i] *= 1e6 // odd rows need a scale
				}
			}
			xb := floatBuffer(t, x)
			rb := buffer(t, F16Bytes(c.n, c.K), nil)
			size := F16BlockedBytes(c.cols, c.K)
			bb := buffer(t, size, bytes.Repeat([]byte{0xFF}, int(size)))
			run(t, func(s *vk.Sequence) error {
				if err := k.QuantizeF16(s, whole(rb), whole(xb), c.n, c.K); err != nil {
					return err
				}
				return k.QuantizeF16Blocked(s, whole(bb), whole(xb), c.n, c.K, c.cols)
			})
			rows, blk := readBytes(t, rb), readBytes(t, bb)
			bad := 0
			for col := 0; col < c.cols; col++ {
				for i := 0; i < c.K; i++ {
					at := 2 * ((i/16*c.cols+col)*16 + i%16)
					got := binary.LittleEndian.Uint16(blk[at:])
					want := uint16(0xFFFF)
					if col < c.n {
						want = binary.LittleEndian.Uint16(rows[2*(col*c.K+i):])
					}
					if got != want && bad < 3 {
						bad++
						t.Errorf("column %d value %d: %#04x, want %#04x", col, i, got, want)
					}
				}
				got := binary.LittleEndian.Uint32(blk[2*c.cols*c.K+4*col:])
				want := uint32(0xFFFFFFFF)
				if col < c.n {
					want = binary.LittleEndian.Uint32(rows[2*c.n*c.K+4*col:])
				}
				if got != want {
					t.Errorf("column %d: scale %#08x, want %#08x", col, got, want)
				}
			}
		})
	}
	b := whole(buffer(t, 1<<16, nil))
	expectRejected(t, []rejected{
		{"K not a multiple of 16", k.QuantizeF16Blocked(nil, b, b, 1, 24, 16)},
		{"fewer columns than rows", k.QuantizeF16Blocked(nil, b, b, 17, 16, 16)},
		{"short layout", k.QuantizeF16Blocked(nil, vk.Binding{Buf: b.Buf, Size: F16BlockedBytes(16, 64) - 4}, b, 3, 64, 16)},
	})
}

// TestF16Ops checks the kernels that write an activation and its f16 copy
// in one pass, the norm (in place too) and the gated activations, in both
// layouts and on awkward shapes: the f32 result against float64 (as
// TestRMSNorm and TestGatedQ8 bound it), and the copy bit for bit what
// QuantizeF16 or QuantizeF16Blocked make of that result, past the copy's
// rows untouched.
func TestF16Ops(t *testing.T) {
	k := setup(t)
	const eps = 1e-5
	for _, op := range []string{"norm", "norm in place", "swiglu", "geglu"} {
		for _, c := range []struct{ n, K, blocked int }{{1, 16, 0}, {3, 4096, 0}, {2, 14336, 16}, {17, 80, 24}, {9, 4096, 16}} {
			t.Run(fmt.Sprintf("%s/%dx%d/blocked%d", op, c.n, c.K, c.blocked), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(c.n), uint64(c.K+c.blocked)))
				x, y := normals(r, c.n*c.K, 3), normals(r, c.n*c.K, 1)
				for i := range x {
					if i%89 == 3 && i/c.K%2 == 1 {
						x[i] *= 1e5 // odd rows need a scale
					}
				}
				if op == "norm in place" || op == "norm" {
					y = y[:c.K]
					for i := range y {
						if i%53 == 1 {
							y[i] *= 1e6 // and some columns beyond f16's range
						}
					}
				}
				xb, yb := floatBuffer(t, x), floatBuffer(t, y)
				ob := xb
				if op != "norm in place" {
					ob = buffer(t, f32(c.n*c.K), nil)
				}
				size := F16Bytes(c.n, c.K)
				if c.blocked != 0 {
					size = F16BlockedBytes(c.blocked, c.K)
				}
				fill := bytes.Repeat([]byte{0xFF}, int(size))
				hb, wantb := buffer(t, size, fill), buffer(t, size, fill)
				run(t, func(s *vk.Sequence) error {
					switch op {
					case "swiglu":
						return k.GatedF16(s, SwiGLU, whole(hb), whole(ob), whole(xb), whole(yb), c.n, c.K, c.blocked)
					case "geglu":
						return k.GatedF16(s, GeGLU, whole(hb), whole(ob), whole(xb), whole(yb), c.n, c.K, c.blocked)
					}
					return k.RMSNormF16(s, whole(hb), whole(ob), whole(xb), whole(yb), c.n, c.K, c.blocked, eps)
				})
				got := read(t, ob, 0, c.n*c.K)
				var want, scale []float64
				tol := 1e-5
				if op == "swiglu" || op == "geglu" {
					g := map[string]GLU{"swiglu": SwiGLU, "geglu": GeGLU}[op]
					want, scale = make([]float64, len(got)), make([]float64, len(got))
					for i, v := range x {
						act, arg := gluRef(g, float64(v))
						want[i] = act * float64(y[i])
						scale[i] = max(math.Abs(want[i])*max(1, math.Abs(arg)/10), 1e-30)
					}
				} else {
					want = rmsNormRef(x, y, c.n, c.K, eps)
					scale = make([]float64, len(want))
					for i, v := range want {
						scale[i] = math.Abs(v)
					}
					tol = 1e-5 + 4*math.Sqrt(float64(c.K))*eps32
				}
				compare(t, "out", got, want, scale, tol)
				// The copy: what the plain rounding makes of the result.
				run(t, func(s *vk.Sequence) error {
					if c.blocked != 0 {
						return k.QuantizeF16Blocked(s, whole(wantb), whole(ob), c.n, c.K, c.blocked)
					}
					return k.QuantizeF16(s, whole(wantb), whole(ob), c.n, c.K)
				})
				if h, w := readBytes(t, hb), readBytes(t, wantb); !bytes.Equal(h, w) {
					for i := 0; i < len(h); i += 2 {
						if h[i] != w[i] || h[i+1] != w[i+1] {
							t.Fatalf("the copy differs from the rounding of the result at byte %d of %d", i, len(h))
						}
					}
				}
			})
		}
	}
	b := whole(buffer(t, 1<<16, nil))
	expectRejected(t, []rejected{
		{"norm: K not a multiple of 8", k.RMSNormF16(nil, b, b, b, b, 1, 12, 0, eps)},
		{"norm: blocked K not a multiple of 16", k.RMSNormF16(nil, b, b, b, b, 1, 24, 16, eps)},
		{"norm: short weights", k.RMSNormF16(nil, b, b, b, vk.Binding{Buf: b.Buf, Size: 60}, 1, 16, 0, eps)},
		{"gated: fewer blocked rows than rows", k.GatedF16(nil, SwiGLU, b, b, b, b, 17, 16, 16)},
		{"gated: unknown activation", k.GatedF16(nil, GLU(7), b, b, b, b, 1, 16, 0)},
		{"gated: short output", k.GatedF16(nil, SwiGLU, b, vk.Binding{Buf: b.Buf, Size: 60}, b, b, 1, 16, 0)},
	})
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

// testCoop runs MatMulCoop on case c as testF16Product does.
func testCoop(t *testing.T, k *Kernels, qt quant.Type, c matCase, tile CoopTile, big float32) {
	t.Helper()
	t.Run(fmt.Sprintf("%s/%dx%d/n%d/%v", qt, c.rows, c.K, c.n, tile), func(t *testing.T) {
		testF16Product(t, k, qt, c, big, F16Bytes(c.n, c.K), 0, func(s *vk.Sequence, dst, w, xh vk.Binding) error {
			return k.MatMulCoop(s, dst, w, xh, qt, c.n, c.rows, c.K, tile)
		})
	})
}

// testF16Product runs QuantizeF16 (QuantizeF16Blocked with blocked
// columns, where blocked > 0) on k and then product on case c, and
// compares dst with the float64 product of the dequantized weights, with
// activations scaled by big in every third column. The activations'
// binding is xBytes long (the layout and whatever padding the product
// reads) at 16 bytes into its buffer; in the blocked layout all of it
// starts as f16 NaNs, so the columns past n, which the product reads,
// must never reach dst.
// The weights sit 256 bytes into their buffer and dst 64 bytes into its.
func testF16Product(t *testing.T, k *Kernels, qt quant.Type, c matCase, big float32, xBytes int64, blocked int,
	product func(s *vk.Sequence, dst, w, xh vk.Binding) error) {
	t.Helper()
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
	const dOff = 64
	w := weightsAt(t, raw, 256)
	xb := floatBuffer(t, x)
	var pad []byte
	if blocked > 0 {
		pad = bytes.Repeat([]byte{0xFF}, int(16+xBytes))
	}
	hb := buffer(t, 16+xBytes, pad)
	db := buffer(t, dOff+f32(c.n*c.rows), nil)
	xh := vk.Binding{Buf: hb, Off: 16, Size: xBytes}
	run(t, func(s *vk.Sequence) error {
		var err error
		if blocked > 0 {
			err = k.QuantizeF16Blocked(s, xh, whole(xb), c.n, c.K, blocked)
		} else {
			err = k.QuantizeF16(s, xh, whole(xb), c.n, c.K)
		}
		if err != nil {
			return err
		}
		s.Barrier()
		return product(s, vk.Binding{Buf: db, Off: dOff, Size: f32(c.n * c.rows)}, w, xh)
	})
	want, scale := matRef(deq, x, c.n, c.rows, c.K)
	// Weights and activations are each rounded to f16 (2^-11, 2^-10
	// allowed for drivers that truncate); products and sums are f32.
	compare(t, "dst", read(t, db, dOff, c.n*c.rows), want, scale, dotTol(c.K)+2.0/1024)
}

// TestCoopTileForShape checks the choice of tile: the narrow batches' tile
// where it fits and leaves enough workgroups, the wide tiles for wide
// batches, and a tuned tile over both.
func TestCoopTileForShape(t *testing.T) {
	for name, k := range coopKernels(t, coopmat.Shape{}) {
		t.Run(name, func(t *testing.T) {
			narrow := narrowCoopTiles[0]
			fits := k.CheckCoopTile(narrow, quant.Q4_K) == nil
			if got := k.CoopTileForShape(quant.Q4_K, 14336, NarrowCoopCols); fits && got != narrow {
				t.Errorf("14336 rows, %d columns: %v, want %v", NarrowCoopCols, got, narrow)
			}
			if got := k.CoopTileForShape(quant.Q4_K, 14336, 512); got == narrow && narrow != k.CoopTileFor(quant.Q4_K) {
				t.Errorf("512 columns took the narrow batches' tile %v", got)
			}
			for _, n := range []int{1, 16, 64, 512} {
				if got := k.CoopTileForShape(quant.Q6_K, 4096, n); k.CheckCoopTile(got, quant.Q6_K) != nil {
					t.Errorf("Q6_K, %d columns: %v does not take Q6_K", n, got)
				}
			}
			tuned := CoopTile{BM: 32, BN: 32, WM: 16, WN: 32, BK: 128, KC: 64}
			k.CoopTiled = tuned
			defer func() { k.CoopTiled = CoopTile{} }()
			if got := k.CoopTileForShape(quant.Q4_K, 14336, 16); got != tuned {
				t.Errorf("with a tuned tile: %v, want %v", got, tuned)
			}
		})
	}
}

// h200Limits is Kernels with an H200's limits and matrix-unit policy (132
// compute units, 48 KiB of shared memory, 16x16x16 fragments on 32-wide
// subgroups) and no device: enough for the built-in shape choices, which
// the policy tests pin without a GPU.
func h200Limits() *Kernels {
	return &Kernels{info: vk.DeviceInfo{ComputeUnits: 132, SharedMemory: 48 << 10, MaxWorkgroupInvocations: 1024, SubgroupSize: 32},
		CoopMat: coopmat.Choice{F16: coopmat.Shape{M: 16, N: 16, K: 16}, Subgroup: 32}}
}

// TestCoopTileForShapeH200 pins the built-in tiles of 512-column products
// on an H200's limits (h200Limits): the widest tile that leaves a matrix
// half as many workgroups as compute units, Q6_K as Q4_K since its stage
// takes 64-value steps, and the 64x128 tile of 32x32 parts for 2048 rows,
// which the 128-row tiles leave 64 workgroups.
func TestCoopTileForShapeH200(t *testing.T) {
	k := h200Limits()
	for _, c := range []struct {
		t    quant.Type
		rows int
		want CoopTile
	}{
		{quant.Q4_K, 14336, CoopTile{BM: 128, BN: 256, WM: 64, WN: 64, BK: 64, KC: 32}},
		{quant.Q6_K, 14336, CoopTile{BM: 128, BN: 256, WM: 64, WN: 64, BK: 64, KC: 32}},
		{quant.Q4_K, 4096, CoopTile{BM: 128, BN: 128, WM: 64, WN: 32, BK: 64, KC: 64}},
		{quant.Q6_K, 4096, CoopTile{BM: 128, BN: 128, WM: 64, WN: 32, BK: 64, KC: 64}},
		{quant.Q4_K, 2048, CoopTile{BM: 64, BN: 128, WM: 32, WN: 32, BK: 64, KC: 64}},
		{quant.Q4_K, 1024, CoopTile{BM: 64, BN: 64, WM: 32, WN: 32, BK: 64, KC: 64}},
		{quant.Q6_K, 1024, CoopTile{BM: 64, BN: 64, WM: 32, WN: 32, BK: 64, KC: 64}},
	} {
		if got := k.CoopTileForShape(c.t, c.rows, 512); got != c.want {
			t.Errorf("%s, %d rows: %v, want %v", c.t, c.rows, got, c.want)
		}
	}
}

// coopCases are the shapes the wide products' tests cycle through: row
// and column counts that leave partial tiles (1, 7, 255, 257, 1025) and K
// of several blocks.
var coopCases = []matCase{
	{rows: 257, K: 768, n: 9},
	{rows: 7, K: 512, n: 255},
	{rows: 1025, K: 256, n: 7},
	{rows: 255, K: 1024, n: 257},
	{rows: 1, K: 768, n: 1025},
	{rows: 33, K: 4096, n: 1},
}

// TestMatMulCoop checks the cooperative-matrix product, on the emulation
// everywhere and on the device's matrix units where it has them, for every
// weight type it takes, at awkward row and column counts (1, 7, 255, 257,
// 1025) and K of several blocks, with several tiles, a fragment shape that
// is not square, and activations beyond f16's range.
func TestMatMulCoop(t *testing.T) {
	types := []quant.Type{quant.Q4_K, quant.Q5_K, quant.Q6_K, quant.Q8_0, quant.Q4_0, quant.F16, quant.BF16}
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
				for _, c := range coopCases {
					tile := tiles[i%len(tiles)]
					if i%3 == 0 { // the engine's
						tile = k.CoopTileFor(qt)
					}
					testCoop(t, k, qt, c, tile, 1)
					i++
				}
			}
			// Steps of one run of pieces: 64 values of the K-quants (the
			// stage's Q6_K pieces, f16stage.glsl), and of two.
			testCoop(t, k, quant.Q4_K, matCase{rows: 40, K: 768, n: 33}, CoopTile{BM: 32, BN: 32, WM: 16, WN: 16, BK: 64, KC: 64}, 1)
			testCoop(t, k, quant.Q5_K, matCase{rows: 17, K: 512, n: 16}, CoopTile{BM: 16, BN: 16, WM: 16, WN: 16, BK: 64, KC: 32}, 1)
			testCoop(t, k, quant.Q6_K, matCase{rows: 40, K: 768, n: 33}, CoopTile{BM: 32, BN: 32, WM: 16, WN: 32, BK: 128, KC: 64}, 1)
			testCoop(t, k, quant.Q6_K, matCase{rows: 37, K: 1280, n: 19}, CoopTile{BM: 32, BN: 32, WM: 16, WN: 16, BK: 64, KC: 32}, 1)
			testCoop(t, k, quant.Q4_K, matCase{rows: 64, K: 512, n: 40}, k.CoopTileFor(quant.Q4_K), 1e6)
			testCoop(t, k, quant.Q8_0, matCase{rows: 40, K: 96, n: 20}, CoopTile{BM: 16, BN: 32, WM: 16, WN: 16, BK: 32, KC: 32}, 1e6)
			// The engine's tiles for narrow batches.
			testCoop(t, k, quant.Q4_K, matCase{rows: 257, K: 512, n: 37}, k.CoopTileForShape(quant.Q4_K, 257, 37), 1)
			testCoop(t, k, quant.Q6_K, matCase{rows: 130, K: 768, n: 9}, k.CoopTileForShape(quant.Q6_K, 130, 9), 1)
			// The 2048-row matrices' tile, where shared memory takes it
			// (not lavapipe's 32 KiB).
			if tile := (CoopTile{BM: 64, BN: 128, WM: 32, WN: 32, BK: 64, KC: 64}); k.CheckCoopTile(tile, quant.Q4_K) == nil {
				testCoop(t, k, quant.Q4_K, matCase{rows: 200, K: 768, n: 150}, tile, 1)
				testCoop(t, k, quant.Q6_K, matCase{rows: 200, K: 1280, n: 150}, tile, 1)
			}
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

// coopRejects returns what the tests of the matrix units' argument checks
// use (nothing is run): Kernels on the emulation (with int8, its integer
// variant on), Kernels with the matrix units off, a buffer of 1 MiB and a
// sequence.
func coopRejects(t *testing.T, int8 bool) (k, off *Kernels, b *vk.Buffer, s *vk.Sequence) {
	t.Helper()
	setup(t)
	k = New(kern.dev)
	k.CoopEmulated, k.CoopInt8 = true, int8
	t.Cleanup(k.Close)
	off = New(kern.dev)
	t.Cleanup(off.Close)
	s = kern.dev.NewSequence()
	t.Cleanup(s.Free)
	return k, off, buffer(t, 1<<20, nil), s
}

func TestMatMulCoopRejects(t *testing.T) {
	k, off, b, s := coopRejects(t, false)
	bind := whole(b)
	tile := CoopTile{BM: 16, BN: 16, WM: 16, WN: 16, BK: 256, KC: 16}
	expectRejected(t, []rejected{
		{"f32 weights", k.MatMulCoop(s, bind, bind, bind, quant.F32, 9, 16, 256, tile)},
		{"off", off.MatMulCoop(s, bind, bind, bind, quant.Q4_K, 9, 16, 256, tile)},
		{"K not a multiple of 8", k.MatMulCoop(s, bind, bind, bind, quant.F16, 9, 16, 36, CoopTile{BM: 16, BN: 16, WM: 16, WN: 16, BK: 16, KC: 16})},
		{"partial fragments", k.MatMulCoop(s, bind, bind, bind, quant.Q4_K, 9, 16, 256, CoopTile{BM: 24, BN: 16, WM: 24, WN: 16, BK: 256, KC: 16})},
		{"partial run of Q4_K pieces", k.MatMulCoop(s, bind, bind, bind, quant.Q4_K, 9, 16, 256, CoopTile{BM: 16, BN: 16, WM: 16, WN: 16, BK: 32, KC: 16})},
		{"partial run of Q6_K pieces", k.MatMulCoop(s, bind, bind, bind, quant.Q6_K, 9, 16, 256, CoopTile{BM: 16, BN: 16, WM: 16, WN: 16, BK: 32, KC: 16})},
		{"chunk", k.MatMulCoop(s, bind, bind, bind, quant.Q4_K, 9, 16, 256, CoopTile{BM: 16, BN: 16, WM: 16, WN: 16, BK: 256, KC: 24})},
		{"shared memory", k.MatMulCoop(s, bind, bind, bind, quant.Q4_K, 9, 16, 256, CoopTile{BM: 256, BN: 16, WM: 16, WN: 16, BK: 256, KC: 16})},
		{"short activations", k.MatMulCoop(s, bind, bind, vk.Binding{Buf: b, Size: 64}, quant.Q4_K, 9, 16, 256, tile)},
	})
}

// coopInt8Kernels returns Kernels whose products run the integer variant
// on the emulation with fragments of shape sh, and, where the device
// offers 8-bit fragments and sh is the zero shape, on its matrix units.
func coopInt8Kernels(t *testing.T, sh coopmat.Shape) map[string]*Kernels {
	t.Helper()
	setup(t)
	out := map[string]*Kernels{}
	if why := vktest.CoopEmulationBroken(kern.dev); why != "" {
		t.Logf("emulation not checked: %s", why)
	} else if sh != (coopmat.Shape{}) {
		emu := New(kern.dev)
		emu.CoopEmulated, emu.CoopInt8 = true, true
		emu.CoopMat.Int8 = sh
		t.Cleanup(emu.Close)
		out["emulated/"+sh.String()] = emu
	}
	c := coopmat.Choose(CoopDevice(kern.info))
	if s, _ := coopmat.Int8Shape(c); !s.IsZero() && sh == (coopmat.Shape{}) && kern.info.Int8 {
		real := New(kern.dev)
		real.CoopMat, real.CoopInt8 = c, true
		t.Cleanup(real.Close)
		out["device/"+s.String()] = real
	}
	return out
}

// TestMatMulCoopInt8 checks the integer variant against the float64
// product of the exact weights and the activations as QuantizeQ8 rounded
// them (it is exact but for f32 rounding), for every weight type it takes,
// at awkward row and column counts and K of several blocks. On the
// emulation with K = 16 fragments (RDNA3's) every case; with K = 32
// (NVIDIA's: Q6_K's runs of 16 staged beside zeros) two cases a type,
// since each pipeline costs lavapipe seconds to build. On the device's
// matrix units, where it has 8-bit ones, every case.
func TestMatMulCoopInt8(t *testing.T) {
	types := []quant.Type{quant.Q4_K, quant.Q5_K, quant.Q6_K, quant.Q8_0, quant.Q4_0}
	tiles := []CoopTile{
		{BM: 32, BN: 32, WM: 16, WN: 32, BK: 256, KC: 64},
		{BM: 16, BN: 48, WM: 16, WN: 16, BK: 512, KC: 32},
	}
	all := func(t *testing.T, k *Kernels) {
		for _, qt := range types {
			for i, c := range coopCases {
				tile := tiles[i%len(tiles)]
				if i%3 == 0 { // the engine's
					tile = k.CoopInt8TileForShape(qt, c.rows, c.n)
				}
				testCoopInt8(t, k, qt, c, tile)
			}
		}
	}
	for name, k := range coopInt8Kernels(t, coopmat.Shape{}) {
		t.Run(name, func(t *testing.T) { all(t, k) })
	}
	for name, k := range coopInt8Kernels(t, coopmat.Shape{M: 16, N: 16, K: 16}) {
		t.Run(name, func(t *testing.T) {
			all(t, k)
			// Steps of one run of pieces (64 values of Q4_K/Q5_K, 128 of
			// Q6_K, a block of the others) and chunks of one block.
			testCoopInt8(t, k, quant.Q4_K, matCase{rows: 40, K: 768, n: 33}, CoopTile{BM: 32, BN: 32, WM: 16, WN: 16, BK: 64, KC: 32})
			testCoopInt8(t, k, quant.Q6_K, matCase{rows: 40, K: 768, n: 33}, CoopTile{BM: 32, BN: 32, WM: 16, WN: 32, BK: 128, KC: 64})
			testCoopInt8(t, k, quant.Q4_0, matCase{rows: 18, K: 160, n: 70}, CoopTile{BM: 32, BN: 64, WM: 16, WN: 32, BK: 32, KC: 32})
		})
	}
	for name, k := range coopInt8Kernels(t, coopmat.Shape{M: 16, N: 16, K: 32}) {
		t.Run(name, func(t *testing.T) {
			for _, qt := range types {
				testCoopInt8(t, k, qt, coopCases[0], tiles[0])
				testCoopInt8(t, k, qt, coopCases[3], tiles[0])
			}
			testCoopInt8(t, k, quant.Q6_K, matCase{rows: 40, K: 768, n: 33}, CoopTile{BM: 32, BN: 32, WM: 16, WN: 32, BK: 128, KC: 64})
		})
	}
}

func testCoopInt8(t *testing.T, k *Kernels, qt quant.Type, c matCase, tile CoopTile) {
	t.Helper()
	t.Run(fmt.Sprintf("%s/%dx%d/n%d/%v", qt, c.rows, c.K, c.n, tile), func(t *testing.T) {
		testQ8Product(t, k, qt, c, false, func(s *vk.Sequence, dst, w, xq vk.Binding, _ *vk.Binding) error {
			return k.MatMulCoopInt8(s, dst, w, xq, qt, c.n, c.rows, c.K, tile)
		})
	})
}

// TestMatMulCoopInt8Accuracy compares the two variants' errors against the
// exact product (float64, the activations unrounded) on activations shaped
// like a transformer's after its RMS norm: unit normals times per-channel
// gains, and a few outlier channels 30 times larger, which set the scale
// of every 32-value block they fall in. The integer variant rounds each
// activation to within half its block's scale d = max|x|/127, so each
// result must lie within sum_k |w_k| d_k / 2 of the exact one (plus f32
// rounding); the f16 variant rounds each weight and activation to 11
// significant bits. Both errors are logged as fractions of the largest
// result, the measure infer check reports: the integer variant's is that
// of the 8-bit activations of matmul_q8, an order of magnitude above the
// f16 variant's.
func TestMatMulCoopInt8Accuracy(t *testing.T) {
	const rows, K, n = 96, 4096, 40
	emu := coopInt8Kernels(t, coopmat.Shape{M: 16, N: 16, K: 16})
	f16 := coopKernels(t, coopmat.Shape{})
	if len(emu) == 0 || f16["emulated"] == nil {
		return // the emulation is broken on this driver: coopInt8Kernels logged why
	}
	ki, kh := emu["emulated/16x16x16"], f16["emulated"]
	r := rand.New(rand.NewPCG(7, 11))
	gain := make([]float32, K)
	for i := range gain {
		gain[i] = float32(0.5 + r.Float64())
		if i%397 == 13 {
			gain[i] *= 30
		}
	}
	x := normals(r, n*K, 1)
	for i := range x {
		x[i] *= gain[i%K]
	}
	for _, qt := range []quant.Type{quant.Q4_K, quant.Q6_K} {
		t.Run(qt.String(), func(t *testing.T) {
			raw, deq := quantized(t, r, qt, rows, K)
			want, scale := matRef(deq, x, n, rows, K)
			bound := make([]float64, n*rows)
			for c := 0; c < n; c++ {
				for b := 0; b < K/32; b++ {
					d := 0.0
					for _, v := range x[c*K+32*b : c*K+32*b+32] {
						d = max(d, math.Abs(float64(v))/127)
					}
					for m := 0; m < rows; m++ {
						for _, w := range deq[m*K+32*b : m*K+32*b+32] {
							bound[c*rows+m] += math.Abs(float64(w)) * d / 2
						}
					}
				}
			}
			wb := buffer(t, int64(len(pad4(raw))), pad4(raw))
			xb := floatBuffer(t, x)
			qb := buffer(t, Q8Bytes(n, K), nil)
			hb := buffer(t, F16Bytes(n, K), nil)
			di := buffer(t, f32(n*rows), nil)
			dh := buffer(t, f32(n*rows), nil)
			run(t, func(s *vk.Sequence) error {
				if err := ki.QuantizeQ8(s, whole(qb), whole(xb), n, K); err != nil {
					return err
				}
				if err := kh.QuantizeF16(s, whole(hb), whole(xb), n, K); err != nil {
					return err
				}
				s.Barrier()
				if err := ki.MatMulCoopInt8(s, whole(di), whole(wb), whole(qb), qt, n, rows, K, ki.CoopInt8TileForShape(qt, rows, n)); err != nil {
					return err
				}
				return kh.MatMulCoop(s, whole(dh), whole(wb), whole(hb), qt, n, rows, K, kh.CoopTileFor(qt))
			})
			gotI, gotH := read(t, di, 0, n*rows), read(t, dh, 0, n*rows)
			largest, errI, errH, bad := 0.0, 0.0, 0.0, 0
			for i := range want {
				largest = max(largest, math.Abs(want[i]))
				ei, eh := math.Abs(float64(gotI[i])-want[i]), math.Abs(float64(gotH[i])-want[i])
				errI, errH = max(errI, ei), max(errH, eh)
				if ei > bound[i]+dotTol(K)*scale[i] {
					if bad++; bad <= 3 {
						t.Errorf("[%d]: integer variant off by %g, beyond the 8-bit rounding's %g", i, ei, bound[i])
					}
				}
			}
			if errH > (dotTol(K)+2.0/1024)*slices.Max(scale) {
				t.Errorf("f16 variant off by %g, beyond f16 rounding", errH)
			}
			t.Logf("max error as a fraction of the largest result (%.3g): integer %.3g, f16 %.3g (%.1fx)", largest, errI/largest, errH/largest, errI/errH)
		})
	}
}

func TestMatMulCoopInt8Rejects(t *testing.T) {
	k, off, b, s := coopRejects(t, true)
	bind := whole(b)
	k64 := New(kern.dev)
	k64.CoopEmulated, k64.CoopInt8 = true, true
	k64.CoopMat.Int8 = coopmat.Shape{M: 16, N: 16, K: 64}
	t.Cleanup(k64.Close)
	tile := CoopTile{BM: 16, BN: 16, WM: 16, WN: 16, BK: 256, KC: 32}
	expectRejected(t, []rejected{
		{"f16 weights", k.MatMulCoopInt8(s, bind, bind, bind, quant.F16, 9, 16, 256, tile)},
		{"off", off.MatMulCoopInt8(s, bind, bind, bind, quant.Q4_K, 9, 16, 256, tile)},
		{"K of 64", k64.MatMulCoopInt8(s, bind, bind, bind, quant.Q4_K, 9, 16, 256, tile)},
		{"partial run of Q6_K pieces", k.MatMulCoopInt8(s, bind, bind, bind, quant.Q6_K, 9, 16, 256, CoopTile{BM: 16, BN: 16, WM: 16, WN: 16, BK: 64, KC: 32})},
		{"chunk of 16", k.MatMulCoopInt8(s, bind, bind, bind, quant.Q8_0, 9, 16, 256, CoopTile{BM: 16, BN: 16, WM: 16, WN: 16, BK: 32, KC: 16})},
		{"shared memory", k.MatMulCoopInt8(s, bind, bind, bind, quant.Q4_K, 9, 16, 256, CoopTile{BM: 256, BN: 16, WM: 16, WN: 16, BK: 256, KC: 32})},
		{"short activations", k.MatMulCoopInt8(s, bind, bind, vk.Binding{Buf: b, Size: 64}, quant.Q4_K, 9, 16, 256, tile)},
		{"activations off 16 bytes", k.MatMulCoopInt8(s, bind, bind, vk.Binding{Buf: b, Off: 4}, quant.Q4_K, 9, 16, 256, tile)},
	})
}

// TestMatMulCoopSplit: matmul_coopmat with K cut into runs of whole steps,
// the partials added by split_sum, for several split counts (more splits
// than steps included: the runs past K add zeros) and tiles, against the
// float64 product.
func TestMatMulCoopSplit(t *testing.T) {
	for name, k := range coopKernels(t, coopmat.Shape{}) {
		t.Run(name, func(t *testing.T) {
			for i, c := range []struct {
				qt     quant.Type
				c      matCase
				tile   CoopTile
				splits int
			}{
				{quant.Q4_K, matCase{rows: 40, K: 768, n: 17}, CoopTile{BM: 32, BN: 32, WM: 16, WN: 16, BK: 64, KC: 64}, 4},
				{quant.Q6_K, matCase{rows: 130, K: 768, n: 9}, CoopTile{BM: 32, BN: 32, WM: 16, WN: 32, BK: 128, KC: 64}, 3},
				{quant.Q4_K, matCase{rows: 257, K: 512, n: 33}, CoopTile{BM: 64, BN: 64, WM: 32, WN: 32, BK: 64, KC: 64}, 16},
				{quant.Q8_0, matCase{rows: 20, K: 96, n: 5}, CoopTile{BM: 16, BN: 16, WM: 16, WN: 16, BK: 32, KC: 32}, 2},
			} {
				t.Run(fmt.Sprintf("%d/%s/%dx%d/n%d/s%d", i, c.qt, c.c.rows, c.c.K, c.c.n, c.splits), func(t *testing.T) {
					part := buffer(t, f32(c.splits*c.c.n*c.c.rows), nil)
					testF16Product(t, k, c.qt, c.c, 1, F16Bytes(c.c.n, c.c.K), 0, func(s *vk.Sequence, dst, w, xh vk.Binding) error {
						if err := k.MatMulCoopSplit(s, whole(part), w, xh, c.qt, c.c.n, c.c.rows, c.c.K, c.tile, c.splits); err != nil {
							return err
						}
						s.Barrier()
						return k.SplitSum(s, dst, whole(part), nil, c.c.n*c.c.rows, c.splits)
					})
				})
			}
		})
	}
}
