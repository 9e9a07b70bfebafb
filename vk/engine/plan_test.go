package engine_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vkinfer/vkinfer/backend"
	"github.com/vkinfer/vkinfer/gguf"
	"github.com/vkinfer/vkinfer/internal/vktest"
	"github.com/vkinfer/vkinfer/model"
	"github.com/vkinfer/vkinfer/model/synth"
	"github.com/vkinfer/vkinfer/vk"
	"github.com/vkinfer/vkinfer/vk/engine"
)

// TestPlanMatchesEngine: the pipelines a Plan lists for a model's passes
// are exactly those the engine builds recording them, for models that
// take every path (K-quants with Q6_K layers; NeoX RoPE, biases, tied
// embeddings and Q8_0 fallbacks; float weights; issue 18's head norms,
// GeGLU, embedding scale, sliding windows and fused weights; issue 19's
// experts, in decode and packed by expert in prefill), batches that take every
// product kernel (1 token; 5, on the matrix-vector kernel; 40, tiled, with
// a short split prefill) and the row programs that decode 2 and 3
// sequences together (the kernels' row modes), with and without integer
// dot products, at both waves and with the plain attention kernel.
func TestPlanMatchesEngine(t *testing.T) {
	models := map[string]string{}
	for _, spec := range []string{"tiny", "tiny-qwen2", "tiny:f16", "tiny-qwen3", "tiny-gemma3", "tiny-phi3", "tiny-qwen3moe"} {
		preset, ft, _ := strings.Cut(spec, ":")
		if ft == "" {
			ft = synth.DefaultFtype
		}
		p := filepath.Join(t.TempDir(), preset+"-"+ft+".gguf")
		if err := synth.Write(p, preset, ft, 1, nil); err != nil {
			t.Fatal(err)
		}
		models[spec] = p
	}
	narrow := intDot
	narrow.NarrowCoop = &on
	type config struct {
		o engine.Options
		// emulate, when set, runs the cooperative-matrix kernels on their
		// emulation (lavapipe has none): the plan must follow which copy
		// of the activations each variant reads (program.q8Out).
		emulate func(*engine.Engine) error
	}
	configs := map[string]config{
		"default": {}, "int-dot": {o: intDot}, "wave64": {o: engine.Options{Wave: 64}}, "plain": {o: engine.Options{PlainAttention: true}},
		"coop-emulated": {intDot, engine.EmulateCoop}, "coop-int8-emulated": {intDot, engine.EmulateCoopInt8},
		"coop-int8-emulated-f32": {f32, engine.EmulateCoopInt8},
		// The 40-token batches take matvec_coopmat.
		"narrow-coop-emulated": {narrow, engine.EmulateCoop},
	}
	for name, path := range models {
		for cname, cf := range configs {
			if cf.emulate != nil && name != "tiny" && name != "tiny-qwen2" {
				continue // each emulated pipeline takes lavapipe seconds to build
			}
			o := cf.o
			t.Run(name+"/"+cname, func(t *testing.T) {
				f, err := gguf.Open(path)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				dev := vktest.Open(t)
				if cf.emulate != nil {
					if why := vktest.CoopEmulationBroken(dev); why != "" {
						t.Logf("not checked: %s", why)
						return
					}
				}
				emulate := func(e *engine.Engine) {
					if cf.emulate != nil {
						if err := cf.emulate(e); err != nil {
							t.Fatal(err)
						}
					}
				}
				e, err := engine.New(dev, o)
				if err != nil {
					t.Fatal(err)
				}
				defer e.Close()
				emulate(e)
				prepare(t, f, e)
				var built []string
				for _, p := range dev.Pipelines() {
					built = append(built, key(p.Spec()))
				}

				pe, err := engine.New(dev, o)
				if err != nil {
					t.Fatal(err)
				}
				emulate(pe)
				plan := pe.Plan()
				prepare(t, f, plan)
				var listed []string
				for _, p := range plan.Pipelines() {
					if !slices.Contains(listed, key(p.Spec)) {
						listed = append(listed, key(p.Spec))
					}
				}
				slices.Sort(listed)
				if !slices.Equal(listed, built) {
					t.Errorf("the plan lists\n%s\nthe engine built\n%s", strings.Join(listed, "\n"), strings.Join(built, "\n"))
				}
				if n := len(dev.Pipelines()); n != len(built) {
					t.Errorf("listing built %d pipelines", n-len(built))
				}
				pe.Close()
			})
		}
	}
}

// prepare loads f on be and records its programs for the test's batches
// and steps.
func prepare(t *testing.T, f *gguf.File, be backend.Backend) {
	t.Helper()
	m, err := model.Load(f, be, model.Options{Context: 256, UBatch: 40, Seqs: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, b := range []struct {
		n   int
		all bool
	}{{1, false}, {5, false}, {40, false}, {40, true}} {
		if err := m.Prepare(b.n, b.all); err != nil {
			t.Fatal(err)
		}
	}
	for n := 2; n <= m.Seqs; n++ {
		if err := m.PrepareRows(n); err != nil {
			t.Fatal(err)
		}
	}
}

func key(s vk.PipelineSpec) string { return fmt.Sprintf("%s|%v|%d", s.Name, s.Spec, s.SubgroupSize) }
