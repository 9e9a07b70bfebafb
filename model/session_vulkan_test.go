package model_test

import (
	"testing"

	"github.com/vkinfer/vkinfer/internal/vktest"
	"github.com/vkinfer/vkinfer/model"
	"github.com/vkinfer/vkinfer/vk/engine"
)

// TestSessionVulkan runs the session checks on the Vulkan engine (lavapipe
// in CI, validation on): reuse on tiny-qwen3, and tiny-gemma3's rings,
// whose re-evaluation the engine's ring kernels must also get right. The
// reused path prefills other batch sizes at other positions than the fresh
// one, so the tiled products and flash attention round differently: the
// bound is TestArchMatchesCPU's for the tiled products.
func TestSessionVulkan(t *testing.T) {
	for _, c := range []struct {
		name  string
		ub    int
		steps []sessionStep
	}{
		{"tiny-qwen3.gguf", 16, prefixSteps()},
		{"tiny-gemma3.gguf", 3, ringSteps()},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, err := engine.New(vktest.Open(t), engine.Options{})
			if err != nil {
				t.Fatal(err)
			}
			m := loadArch(t, c.name, e, model.Options{Context: 64, UBatch: c.ub})
			runSession(t, m, c.steps, 3e-3)
		})
	}
}

// TestEvalBatchVulkan runs TestEvalBatch's rounds on the Vulkan engine:
// row programs that hold several rows of one sequence (a prompt beside
// other sequences' decode tokens), whose rows attend over keys the same
// pass stores, on global attention and on tiny-gemma3's rings. The
// reference prefills with the tiled products and flash attention, the
// batch with the row programs' kernels: the bound is TestSessionVulkan's.
func TestEvalBatchVulkan(t *testing.T) {
	for _, c := range []struct {
		name string
		ub   int
	}{{"tiny-qwen3.gguf", 16}, {"tiny-gemma3.gguf", 3}} {
		t.Run(c.name, func(t *testing.T) {
			open := func(seqs int) *model.Model {
				e, err := engine.New(vktest.Open(t), engine.Options{})
				if err != nil {
					t.Fatal(err)
				}
				return loadArch(t, c.name, e, model.Options{Context: 64, UBatch: c.ub, Seqs: seqs})
			}
			checkBatches(t, open(4), open(1), c.ub, 3e-3)
		})
	}
}
