package engine_test

import (
	"strings"
	"testing"

	"github.com/vkinfer/vkinfer/gguf"
	"github.com/vkinfer/vkinfer/internal/fixtures"
	"github.com/vkinfer/vkinfer/internal/vktest"
	"github.com/vkinfer/vkinfer/vk/engine"
)

// TestNormFoldMatchesUnfused runs the arch models in Q4_K_M on 8-bit
// activations, where decode folds the norms after the o and down products
// into them (FuseNorm), against the same engine with the fold off, over a
// 12-token prompt token by token (batches of several sequences or tokens
// take no fold). The two round the
// same values to 8 bits but for the norm's factor (f32 rounding apart:
// over a few tokens they agree to 1e-6 of a logit); now and then one
// rounding lands on the other side of a half, which these random tiny
// models carry to about a percent of a logit, so the bound is 8-bit
// activations' against the CPU engine (TestMatchesCPU). A missing or wrong
// 1/rms, or a block rounded with another's scale, is off by far more; the
// kernels themselves are checked closely by kernels.TestNormFold. The plan
// must list the folded products (Llama, Qwen3, Phi-3: their residual
// products are matrix-vector products followed by a norm), so that the
// comparison is not of two unfolded runs; Gemma 3 (post-norms) and the MoE
// model (whose residual products are the expert mix, and whose FFN norm
// runs beside the router) take no fold.
func TestNormFoldMatchesUnfused(t *testing.T) {
	toks := make([]int32, 12)
	for i := range toks {
		toks[i] = int32(3 + (i*71+5)%500)
	}
	for _, c := range []struct {
		model string
		folds bool
	}{{"tiny-llama31", true}, {"tiny-qwen3", true}, {"tiny-phi3", true}, {"tiny-gemma3", false}, {"tiny-qwen3moe", false}} {
		t.Run(c.model, func(t *testing.T) {
			f, err := gguf.Open(fixtures.Path(t, "arch", c.model+"-q4_k_m.gguf"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			pe, err := engine.New(vktest.Open(t), intDot)
			if err != nil {
				t.Fatal(err)
			}
			defer pe.Close()
			plan := pe.Plan()
			prepare(t, f, plan)
			folded := 0
			for _, p := range plan.Pipelines() {
				if strings.HasSuffix(p.Op, "+norm") || strings.HasSuffix(p.Op, "on a folded norm") {
					folded++
				}
			}
			if (folded > 0) != c.folds {
				t.Fatalf("%d folded products listed, want folds %v", folded, c.folds)
			}
			unfused := intDot
			unfused.Unfuse = engine.FuseNorm
			want := forwardPrompt(t, f, openWith(t, unfused), 1, toks)
			got := forwardPrompt(t, f, openWith(t, intDot), 1, toks)
			worst, scale := logitDiff(want, got)
			t.Logf("max |folded − unfolded| = %.3g over %d logits (max |logit| %.3g)", worst, len(want), scale)
			if worst > 3e-2*max(1, scale) {
				t.Fatalf("the folded norm's logits differ from the unfolded by %.3g (max |logit| %.3g)", worst, scale)
			}
		})
	}
}
