package engine_test

import (
	"path/filepath"
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
func TestCoopMatchesCPU(t *testing.T) {
	paths := map[string]string{"llama-2-tiny-random": fixtures.Path(t, "llama-2-tiny-random.gguf")}
	for _, c := range [][2]string{{"tiny", "q4_k_m"}, {"tiny-qwen2", "q8_0"}, {"tiny", "f16"}, {"tiny-qwen3moe", "q4_k_m"}} {
		p := filepath.Join(t.TempDir(), c[0]+"-"+c[1]+".gguf")
		if err := synth.Write(p, c[0], c[1], 1, nil); err != nil {
			t.Fatal(err)
		}
		paths["synth "+c[0]+" "+c[1]] = p
	}
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
				ub  int
				o   engine.Options
				tol float64
			}{{16, f32, 3e-3}, {32, f32, 3e-3}, {16, intDot, 3e-2}} {
				ref := cpu.New(0)
				ref.F16KV = true
				e := openWith(t, c.o)
				if why := vktest.CoopEmulationBroken(e.Device()); why != "" {
					t.Logf("not checked: %s", why)
					return
				}
				if err := engine.EmulateCoop(e); err != nil {
					t.Fatal(err)
				}
				want, got := forward(t, f, ref, c.ub), forward(t, f, e, c.ub)
				worst, scale := logitDiff(want, got)
				if strings.Contains(name, "moe") {
					c.tol = max(c.tol, 6e-3)
				}
				t.Logf("ubatch %d int-dot %v: max |GPU − CPU| = %.3g over %d logits (max |logit| %.3g)", c.ub, e.IntDot(), worst, len(want), scale)
				if worst > c.tol*max(1, scale) {
					t.Fatalf("ubatch %d: GPU logits differ from the CPU engine's by %.3g (max |logit| %.3g)", c.ub, worst, scale)
				}
			}
		})
	}
}
