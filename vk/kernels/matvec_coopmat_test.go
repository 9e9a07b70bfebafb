package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/vkinfer/vkinfer/coopmat"
	"github.com/vkinfer/vkinfer/quant"
	"github.com/vkinfer/vkinfer/vk"
)

// testMatVecCoop runs MatVecCoopWith on case c as testF16Product does,
// the activations' padding past QuantizeF16's layout holding f16 NaNs.
func testMatVecCoop(t *testing.T, k *Kernels, qt quant.Type, c matCase, sh MatVecCoopShape, big float32) {
	t.Helper()
	t.Run(fmt.Sprintf("%s/%dx%d/n%d/%v", qt, c.rows, c.K, c.n, sh), func(t *testing.T) {
		testF16Product(t, k, qt, c, big, k.MatVecCoopXBytes(sh, c.n, c.K), k.MatVecCoopCols(sh, c.n), func(s *vk.Sequence, dst, w, xh vk.Binding) error {
			return k.MatVecCoopWith(s, dst, w, xh, qt, c.n, c.rows, c.K, sh)
		})
	})
}

// TestMatVecCoop checks the narrow batches' cooperative-matrix product,
// on the emulation everywhere and on the device's matrix units where it
// has them, for every weight type it takes, at awkward row counts (1, 7,
// 255, 257, 1025) and widths (9, 16, 17, 33, 63, 64), K of several
// blocks, a long K split among subgroups, shapes beyond the built-in
// ones, a fragment shape that is not square (more than one workgroup
// along N), and activations beyond f16's range.
func TestMatVecCoop(t *testing.T) {
	types := []quant.Type{quant.Q4_K, quant.Q5_K, quant.Q6_K, quant.Q8_0, quant.Q4_0, quant.F16, quant.BF16}
	cases := []matCase{
		{rows: 257, K: 768, n: 9},
		{rows: 7, K: 512, n: 16},
		{rows: 1025, K: 256, n: 17},
		{rows: 255, K: 1024, n: 33},
		{rows: 1, K: 768, n: 63},
		{rows: 33, K: 512, n: 64},
	}
	for name, k := range coopKernels(t, coopmat.Shape{}) {
		t.Run(name, func(t *testing.T) {
			for i, qt := range types {
				for _, c := range []matCase{cases[i%len(cases)], cases[(i+3)%len(cases)]} {
					testMatVecCoop(t, k, qt, c, k.MatVecCoopFor(qt, c.n, c.rows, c.K), 1)
				}
			}
			// A long K (Llama-3-8B's down projection) over few rows: split
			// among the subgroups.
			sh := k.MatVecCoopFor(quant.Q4_K, 9, 40, 14336)
			if sh.Split < 2 {
				t.Errorf("40x14336: shape %v does not split K", sh)
			}
			testMatVecCoop(t, k, quant.Q4_K, matCase{rows: 40, K: 14336, n: 9}, sh, 1)
			// Splits that leave some subgroups a step fewer than others, two
			// fragments of rows, short steps of each kind.
			testMatVecCoop(t, k, quant.Q6_K, matCase{rows: 70, K: 768, n: 20}, MatVecCoopShape{Subgroups: 4, Split: 4, FM: 1, FN: 2, BK: 128}, 1)
			testMatVecCoop(t, k, quant.Q5_K, matCase{rows: 100, K: 768, n: 12}, MatVecCoopShape{Subgroups: 4, Split: 2, FM: 2, FN: 1, BK: 64}, 1)
			testMatVecCoop(t, k, quant.Q4_K, matCase{rows: 257, K: 512, n: 30}, MatVecCoopShape{Subgroups: 2, Split: 1, FM: 1, FN: 2, BK: 128}, 1)
			testMatVecCoop(t, k, quant.Q8_0, matCase{rows: 50, K: 96, n: 40}, MatVecCoopShape{Subgroups: 4, Split: 2, FM: 1, FN: 3, BK: 32}, 1e6)
			testMatVecCoop(t, k, quant.F16, matCase{rows: 19, K: 48, n: 11}, MatVecCoopShape{Subgroups: 4, Split: 1, FM: 1, FN: 1, BK: 16}, 1)
			testMatVecCoop(t, k, quant.Q4_K, matCase{rows: 64, K: 512, n: 40}, k.MatVecCoopFor(quant.Q4_K, 40, 64, 512), 1e6)
		})
	}
	// NVIDIA's 16x8x16 fragments: 33 columns take two workgroups along N.
	for name, k := range coopKernels(t, coopmat.Shape{M: 16, N: 8, K: 16}) {
		t.Run(name+"/16x8x16", func(t *testing.T) {
			testMatVecCoop(t, k, quant.Q6_K, matCase{rows: 255, K: 512, n: 33}, k.MatVecCoopFor(quant.Q6_K, 33, 255, 512), 1)
			testMatVecCoop(t, k, quant.BF16, matCase{rows: 9, K: 64, n: 64}, k.MatVecCoopFor(quant.BF16, 64, 9, 64), 1)
			// 20 columns: three 8-wide fragments, an activation copy of 24.
			testMatVecCoop(t, k, quant.Q4_K, matCase{rows: 40, K: 256, n: 20}, k.MatVecCoopFor(quant.Q4_K, 20, 40, 256), 1)
		})
	}
}

// TestMatVecCoopForH200 pins the built-in shapes of 16-column products on
// an H200's limits (h200Limits): K split until the matrix has 4 subgroups
// per compute unit, at most 8 ways.
func TestMatVecCoopForH200(t *testing.T) {
	k := h200Limits()
	for _, c := range []struct {
		t       quant.Type
		rows, K int
		want    string
	}{
		{quant.Q4_K, 14336, 4096, "g4s1m1n1k128"},
		{quant.Q4_K, 4096, 14336, "g4s4m1n1k128"},
		{quant.Q6_K, 4096, 14336, "g4s4m1n1k128"},
		{quant.Q4_K, 4096, 4096, "g4s4m1n1k128"},
		{quant.Q4_K, 1024, 4096, "g8s8m1n1k128"},
	} {
		if got := k.MatVecCoopFor(c.t, 16, c.rows, c.K); got.String() != c.want {
			t.Errorf("%dx%d %s, 16 columns: %v, want %s", c.rows, c.K, c.t, got, c.want)
		}
	}
}

func TestMatVecCoopRejects(t *testing.T) {
	k, off, b, s := coopRejects(t, false)
	bind := whole(b)
	sh := MatVecCoopShape{Subgroups: 4, Split: 2, FM: 1, FN: 1, BK: 64}
	expectRejected(t, []rejected{
		{"f32 weights", k.MatVecCoopWith(s, bind, bind, bind, quant.F32, 9, 16, 256, sh)},
		{"off", off.MatVecCoopWith(s, bind, bind, bind, quant.Q4_K, 9, 16, 256, sh)},
		{"K not a multiple of the step", k.MatVecCoopWith(s, bind, bind, bind, quant.Q8_0, 9, 16, 96, sh)},
		{"partial run of Q6_K pieces", k.MatVecCoopWith(s, bind, bind, bind, quant.Q6_K, 9, 16, 256, MatVecCoopShape{Subgroups: 4, Split: 2, FM: 1, FN: 1, BK: 32})},
		{"split not dividing", k.MatVecCoopWith(s, bind, bind, bind, quant.Q4_K, 9, 16, 256, MatVecCoopShape{Subgroups: 4, Split: 3, FM: 1, FN: 1, BK: 64})},
		{"zero fragments", k.MatVecCoopWith(s, bind, bind, bind, quant.Q4_K, 9, 16, 256, MatVecCoopShape{Subgroups: 4, Split: 1, FM: 1, FN: 0, BK: 64})},
		{"shared memory", k.MatVecCoopWith(s, bind, bind, bind, quant.Q4_K, 9, 16, 4096, MatVecCoopShape{Subgroups: 64, Split: 1, FM: 4, FN: 1, BK: 4096})},
		{"Q4_K weights off 16 bytes", k.MatVecCoopWith(s, bind, vk.Binding{Buf: b, Off: 4, Size: 1 << 16}, bind, quant.Q4_K, 9, 16, 256, sh)},
		{"short residual", k.MatVecCoopAdd(s, bind, bind, bind, vk.Binding{Buf: b, Size: 64}, quant.Q4_K, 9, 16, 256)},
		// 9 columns of 256 values fit F16Bytes, but the fragment reads 16.
		{"unpadded activations", k.MatVecCoopWith(s, bind, bind, vk.Binding{Buf: b, Size: F16Bytes(9, 256)}, quant.Q4_K, 9, 16, 256, sh)},
	})
}

// TestMatVecCoopAdd checks the residual variant in place (dst = r + W·x
// with dst the residual's buffer), as the engine's MatMulAdd runs it.
func TestMatVecCoopAdd(t *testing.T) {
	for name, k := range coopKernels(t, coopmat.Shape{}) {
		for _, c := range []struct {
			qt quant.Type
			matCase
		}{{quant.Q4_K, matCase{rows: 257, K: 512, n: 17}}, {quant.Q6_K, matCase{rows: 100, K: 768, n: 40}}} {
			t.Run(fmt.Sprintf("%s/%s/%dx%d/n%d", name, c.qt, c.rows, c.K, c.n), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(c.rows), uint64(c.n)))
				raw, deq := quantized(t, r, c.qt, c.rows, c.K)
				x := normals(r, c.n*c.K, 1)
				res := normals(r, c.n*c.rows, 4)
				wb := buffer(t, int64(len(raw)), pad4(raw))
				xb := floatBuffer(t, x)
				hb := buffer(t, k.MatVecCoopXBytes(k.MatVecCoopFor(c.qt, c.n, c.rows, c.K), c.n, c.K), nil)
				db := floatBuffer(t, res)
				run(t, func(s *vk.Sequence) error {
					if err := k.QuantizeF16Blocked(s, whole(hb), whole(xb), c.n, c.K, k.MatVecCoopCols(k.MatVecCoopFor(c.qt, c.n, c.rows, c.K), c.n)); err != nil {
						return err
					}
					s.Barrier()
					return k.MatVecCoopAdd(s, whole(db), whole(wb), whole(hb), whole(db), c.qt, c.n, c.rows, c.K)
				})
				want, scale := matRef(deq, x, c.n, c.rows, c.K)
				for i := range want {
					want[i] += float64(res[i])
					scale[i] += math.Abs(float64(res[i]))
				}
				compare(t, "dst", read(t, db, 0, c.n*c.rows), want, scale, dotTol(c.K)+2.0/1024)
			})
		}
	}
}
