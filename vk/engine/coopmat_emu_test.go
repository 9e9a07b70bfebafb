package engine_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vkinfer/vkinfer/internal/vktest"

	"github.com/vkinfer/vkinfer/backend/cpu"
	"github.com/vkinfer/vkinfer/gguf"
	"github.com/vkinfer/vkinfer/internal/fixtures"
	"github.com/vkinfer/vkinfer/model/synth"
	"github.com/vkinfer/vkinfer/vk/engine"
)

// TestCoopMatchesCPU runs prefill batches through the cooperative-matrix
// products and flash attention, on their software emulation, and compares
// the logits with the CPU engine's: weights, activations, Q and the softmax
// weights rounded to f16, about 1e-3 of the largest logit on these 64-wide
// models, as the f16 tiles of the scalar kernel measure. tiny-qwen3moe's
// experts run packed by expert (matmul_coopmat_id), and its router
// magnifies the rounding (TestArchMatchesCPU): 6e-3 of the largest logit.
// The products' integer variant (--coopmat int8) rounds the activations
// of quantized weights to 8 bits as matmul_q8 does, and is bound as the
// 8-bit path is (on tiny-qwen3moe, whose router magnifies it, by that
// path's own error or a flipped router's at its worst position, and the
// 8-bit tolerance at its median one); whatever the integer dot-product
// setting, its
// batches read the 8-bit copies (the norms and SwiGLU write them where
// that setting is on).
func TestCoopMatchesCPU(t *testing.T) {
	paths := map[string]string{"llama-2-tiny-random": fixtures.Path(t, "llama-2-tiny-random.gguf")}
	for _, c := range [][2]string{{"tiny", "q4_k_m"}, {"tiny-qwen2", "q8_0"}, {"tiny", "f16"}, {"tiny-qwen3moe", "q4_k_m"}} {
		p := filepath.Join(t.TempDir(), c[0]+"-"+c[1]+".gguf")
		if err := synth.Write(p, c[0], c[1], 1, nil); err != nil {
			t.Fatal(err)
		}
		paths["synth "+c[0]+" "+c[1]] = p
	}
	// Narrow batches on matvec_coopmat, in place of the 8-bit
	// matrix-vector products they would take (the last token's logits keep
	// 8-bit activations: int-dot's tolerance).
	narrow := intDot
	narrow.NarrowCoop = &on
	for name, path := range paths {
		t.Run(name, func(t *testing.T) {
			f, err := gguf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			// With 8-bit activations on, prefill's products read f16 copies
			// and decode's 8-bit ones: each kernel must write the copy its
			// readers take (program.q8Out).
			for _, c := range []struct {
				ub   int
				o    engine.Options
				int8 bool
				tol  float64
			}{{16, f32, false, 3e-3}, {32, f32, false, 3e-3}, {16, intDot, false, 3e-2}, {16, intDot, true, 3e-2}, {32, f32, true, 3e-2}, {16, narrow, false, 3e-2}} {
				ref := cpu.New(0)
				ref.F16KV = true
				e := openWith(t, c.o)
				if why := vktest.CoopEmulationBroken(e.Device()); why != "" {
					t.Logf("not checked: %s", why)
					return
				}
				emulate := engine.EmulateCoop
				if c.int8 {
					emulate = engine.EmulateCoopInt8
				}
				if err := emulate(e); err != nil {
					t.Fatal(err)
				}
				want, got := forward(t, f, ref, c.ub), forward(t, f, e, c.ub)
				worst, scale := logitDiff(want, got)
				if strings.Contains(name, "moe") {
					c.tol = max(c.tol, 6e-3)
					if c.int8 {
						// The router flips its choice at a few positions
						// under any 8-bit rounding of the activations,
						// and which positions flip depends on the
						// rounding. On lavapipe every 8-bit path (here
						// matmul_q8, the variant, f16 fragments with
						// 8-bit decode) read 0.365–0.381 of logits up to
						// 5.46, at the same positions, and under 0.09
						// at the others; on an H100 matmul_q8 read 0.251
						// and the variant 0.383. So the variant may be
						// as far off as matmul_q8 (its prefill on every
						// device, the policy's matrix units off) or as
						// such a flip (8 % of the largest logit) at its
						// worst position, and must stay within the
						// 8-bit path's 3 % at the median position, where
						// no flip is.
						q8o := intDot
						q8o.CoopMat = new(bool)
						q8 := openWith(t, q8o)
						q8err, _ := logitDiff(want, forward(t, f, q8, c.ub))
						c.tol = max(c.tol, 1.25*q8err/max(1, scale), 0.08)
						med := medianPositionDiff(want, got, len(prompt))
						t.Logf("ubatch %d: the 8-bit path (matmul_q8) is off by %.3g; the variant by %.3g at its median position", c.ub, q8err, med)
						if med > 3e-2*max(1, scale) {
							t.Fatalf("ubatch %d: the integer variant's median position is off by %.3g (max |logit| %.3g)", c.ub, med, scale)
						}
					}
				}
				t.Logf("ubatch %d int-dot %v coopmat int8 %v: max |GPU − CPU| = %.3g over %d logits (max |logit| %.3g)", c.ub, e.IntDot(), e.CoopInt8(), worst, len(want), scale)
				if worst > c.tol*max(1, scale) {
					t.Fatalf("ubatch %d: GPU logits differ from the CPU engine's by %.3g (max |logit| %.3g)", c.ub, worst, scale)
				}
			}
		})
	}
}

// medianPositionDiff is the median over the n positions of logits want and
// got (n rows each) of each position's largest difference.
func medianPositionDiff(want, got []float32, n int) float64 {
	vocab := len(want) / n
	d := make([]float64, n)
	for i := range n {
		d[i], _ = logitDiff(want[i*vocab:(i+1)*vocab], got[i*vocab:(i+1)*vocab])
	}
	slices.Sort(d)
	return d[n/2]
}
