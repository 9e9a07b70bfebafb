package engine_test

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vkinfer/vkinfer/backend"
	"github.com/vkinfer/vkinfer/backend/cpu"
	"github.com/vkinfer/vkinfer/gguf"
	"github.com/vkinfer/vkinfer/internal/fixtures"
	"github.com/vkinfer/vkinfer/model"
	"github.com/vkinfer/vkinfer/model/synth"
	"github.com/vkinfer/vkinfer/tune"

	"github.com/vkinfer/vkinfer/internal/golden"
	"github.com/vkinfer/vkinfer/internal/vktest"
	"github.com/vkinfer/vkinfer/vk/engine"
	"github.com/vkinfer/vkinfer/vk/kernels"
)

// open returns the engine on a new validated Vulkan device (lavapipe in CI);
// any validation message fails the test.
func open(t *testing.T) *engine.Engine {
	t.Helper()
	return openWith(t, engine.Options{})
}

func openWith(t *testing.T, o engine.Options) *engine.Engine {
	t.Helper()
	e, err := engine.New(vktest.Open(t), o)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// intDot forces 8-bit-activation products on, which lavapipe (whose dot
// products are emulated) does not take by default; f32 forces them off,
// which devices with native dot products (NVIDIA) do not take by default.
var (
	intDot = engine.Options{IntDot: func() *bool { on := true; return &on }()}
	f32    = engine.Options{IntDot: func() *bool { off := false; return &off }()}
	// on is an on|off|auto option set to on.
	on = true
)

// kvTolerance bounds the logit error that the f16 KV cache alone causes on
// the golden models: llama.cpp's runs kept K and V in f32, and rounding them
// to f16 moves stories260K's logits by up to 0.025 (measured with the CPU
// engine's F16KV option). The greedy text must still be identical.
const kvTolerance = 3e-2

// intDotTolerance bounds the logit error of 8-bit activations on the golden
// models. Rounding activations to 8 bits per 32 values (as llama.cpp's
// integer-dot and CPU paths do) moves the quantized stories260K's logits,
// up to about 19, by up to 0.25 against llama.cpp's float runs: its rows of
// 64 values are two blocks each, far coarser than a real model's. All 48
// greedy tokens still match.
const intDotTolerance = 0.3

// TestGoldenVulkan runs every llama.cpp golden file through the GPU engine
// with flash attention at both waves (on lavapipe's subgroups of 8 each
// lane group spans several subgroups), and again with 8-bit activations in
// its products.
func TestGoldenVulkan(t *testing.T) {
	for name, tol := range golden.Files(t) {
		tol.Logit = max(tol.Logit, kvTolerance)
		for _, w := range []int{32, 64} {
			t.Run(fmt.Sprintf("%s/wave%d", name, w), func(t *testing.T) {
				golden.Check(t, openWith(t, engine.Options{Wave: w, IntDot: f32.IntDot}), name, tol)
			})
		}
		t.Run(name+"/int-dot", func(t *testing.T) {
			tol.Logit = max(tol.Logit, intDotTolerance)
			golden.Check(t, openWith(t, intDot), name, tol)
		})
	}
}

// TestGoldenArchVulkan runs llama.cpp's golden runs of the other
// architectures (arch/golden: Qwen3, Gemma 3, Phi-3, Llama 3.1, F32 and
// Q4_K_M) through the GPU engine at both waves and with 8-bit activations,
// with the bounds of TestGoldenVulkan.
func TestGoldenArchVulkan(t *testing.T) {
	for name, tol := range golden.ArchFiles(t) {
		tol.Logit = max(tol.Logit, kvTolerance)
		for _, w := range []int{32, 64} {
			t.Run(fmt.Sprintf("%s/wave%d", filepath.Base(name), w), func(t *testing.T) {
				golden.Check(t, openWith(t, engine.Options{Wave: w, IntDot: f32.IntDot}), name, tol)
			})
		}
		t.Run(filepath.Base(name)+"/int-dot", func(t *testing.T) {
			tol.Logit = max(tol.Logit, intDotTolerance)
			golden.Check(t, openWith(t, intDot), name, tol)
		})
	}
}

// TestArchMatchesCPU compares the GPU engine's logits at every position of
// a 40-token prompt with the CPU engine's (both with an f16 KV cache) on
// the arch models, in batches of 16, of 8 and of one token (and of 32 for
// the MoE model, whose router runs in parts from 32 tokens): Gemma 3's
// sliding layers (window 8) then keep rings of 23, 15 and 8 slots, which
// the prompt wraps once to four times, batches straddling the wrap.
func TestArchMatchesCPU(t *testing.T) {
	long := make([]int32, 40)
	for i := range long {
		long[i] = int32(3 + (i*97+11)%500)
	}
	for _, m := range []string{"tiny-qwen3", "tiny-gemma3", "tiny-phi3", "tiny-llama31", "tiny-qwen3moe"} {
		for _, ft := range []string{"", "-q4_k_m"} {
			t.Run(m+ft, func(t *testing.T) {
				f, err := gguf.Open(fixtures.Path(t, "arch", m+ft+".gguf"))
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				// ubatch 16: the tiled products, whose f16 weight tiles
				// cost up to 1.3e-3 of the largest logit (measured on
				// lavapipe); 8 and 1: the matrix-vector kernels, f32
				// throughout, where what remains (up to 1.4e-4) is the f16
				// cache: keys and values that differ in their last f32
				// bits between the engines round to neighbouring f16s now
				// and then (5e-4 relative, Q and K norms keep keys O(1)).
				for _, c := range []struct {
					ub  int
					tol float64
				}{{32, 3e-3}, {16, 3e-3}, {8, 4e-4}, {1, 4e-4}} {
					ub := c.ub
					if ub >= kernels.RouterPartsMinRows && !strings.Contains(m, "moe") {
						continue // for the MoE model's router in parts alone
					}
					if strings.Contains(m, "moe") && ub > kernels.MaxMatVecCols {
						// The router magnifies the f16 weight tiles' rounding:
						// the renormalised weights of two close experts
						// follow the difference of their logits (measured:
						// 3.8e-3 of the largest logit).
						c.tol = 6e-3
					}
					ref := cpu.New(0)
					ref.F16KV = true
					want := forwardPrompt(t, f, ref, ub, long)
					opts := []engine.Options{{Wave: 32, IntDot: f32.IntDot}, {Wave: 64, IntDot: f32.IntDot}}
					if ub == 1 || strings.Contains(m, "moe") && ub > kernels.MaxMatVecCols {
						// Every fusion off: decode's separate norms,
						// rotations, cache stores and products, which the
						// fusions otherwise replace in every decode step;
						// for the MoE model's batches the router as a
						// product and route.comp, which the fused router
						// otherwise replaces in prefill too.
						all, _ := engine.ParseFusions("all")
						opts = append(opts, engine.Options{Wave: 32, IntDot: f32.IntDot, Unfuse: all})
					}
					for _, o := range opts {
						got := forwardPrompt(t, f, openWith(t, o), ub, long)
						worst, scale := logitDiff(want, got)
						t.Logf("ubatch %d wave %d unfused %v: max |GPU − CPU| = %.3g over %d logits (max |logit| %.3g)", ub, o.Wave, o.Unfuse != 0, worst, len(want), scale)
						if worst > c.tol*max(1, scale) {
							t.Fatalf("ubatch %d wave %d unfused %v: GPU logits differ from the CPU engine's by %.3g (max |logit| %.3g)", ub, o.Wave, o.Unfuse != 0, worst, scale)
						}
					}
				}
			})
		}
	}
}

// TestMatchesCPU compares the GPU engine's logits at every prompt position
// with the CPU engine's, both with an f16 KV cache, on models whose logits
// are not chaotic in the cache's rounding (stories260K is: one f16 ulp of a
// cached key moves its logits by 1e-2, so it is checked by the golden test):
// llama-2-tiny-random (F16 weights) and the synthetic tiny preset in each of
// its type mixes. The 17-token prompt runs as a 16-token tiled batch and a
// 1-token matrix-vector batch, then as matrix-vector batches alone, each to
// the bound its arithmetic allows.
func TestMatchesCPU(t *testing.T) {
	paths := map[string]string{"llama-2-tiny-random": fixtures.Path(t, "llama-2-tiny-random.gguf")}
	// tiny-qwen2 covers NeoX RoPE, q/k/v biases and tied embeddings.
	for _, preset := range []string{"tiny", "tiny-qwen2"} {
		for _, ft := range synth.Ftypes() {
			p := filepath.Join(t.TempDir(), preset+"-"+ft+".gguf")
			if err := synth.Write(p, preset, ft, 1, nil); err != nil {
				t.Fatal(err)
			}
			paths["synth "+preset+" "+ft] = p
		}
	}
	for name, path := range paths {
		t.Run(name, func(t *testing.T) {
			f, err := gguf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			run := func(be backend.Backend, ub int) []float32 { return forward(t, f, be, ub) }
			// ubatch 16: a 16-token batch through the tiled matmul, which stages
			// quantized weights in shared memory as f16 (11-bit mantissas, as
			// llama.cpp's Vulkan matmul does), about 1e-3 of the largest logit.
			// ubatch 8: only matrix-vector batches, f32 throughout, under 1e-4.
			// int-dot: the activations of quantized weights' products
			// rounded to 8 bits (tiled and matrix-vector kernels), measured
			// at up to 2% of the largest logit on these 64-wide models.
			for _, c := range []struct {
				ub  int
				o   engine.Options
				tol float64
			}{{16, f32, 1.5e-3}, {8, f32, 2e-4}, {16, intDot, 3e-2}, {8, intDot, 3e-2}} {
				ref := cpu.New(0)
				ref.F16KV = true
				want, got := run(ref, c.ub), run(openWith(t, c.o), c.ub)
				worst, scale := logitDiff(want, got)
				t.Logf("ubatch %d int-dot %v: max |GPU − CPU| = %.3g over %d logits (max |logit| %.3g)", c.ub, c.o.IntDot != nil, worst, len(want), scale)
				if worst > c.tol*max(1, scale) {
					t.Fatalf("ubatch %d: GPU logits differ from the CPU engine's by %.3g (max |logit| %.3g)", c.ub, worst, scale)
				}
			}
		})
	}
}

// prompt is 17 tokens: with ubatch 16, a 16-token batch and a 1-token one.
var prompt = []int32{1, 403, 407, 261, 378, 300, 400, 411, 259, 350, 290, 401, 402, 277, 288, 301, 302}

// forward loads f on be with batches of ub tokens and returns the logits
// of every prompt position.
// logitDiff returns the largest |got - want| and the largest |want|.
func logitDiff(want, got []float32) (worst, scale float64) {
	for i := range want {
		worst = max(worst, math.Abs(float64(got[i]-want[i])))
		scale = max(scale, math.Abs(float64(want[i])))
	}
	return worst, scale
}

func forward(t *testing.T, f *gguf.File, be backend.Backend, ub int) []float32 {
	t.Helper()
	return forwardPrompt(t, f, be, ub, prompt)
}

// forwardPrompt is forward with the prompt toks.
func forwardPrompt(t *testing.T, f *gguf.File, be backend.Backend, ub int, toks []int32) []float32 {
	t.Helper()
	m, err := model.Load(f, be, model.Options{Context: 64, UBatch: ub})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	out, err := m.Forward(toks, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	return append([]float32(nil), out...)
}

// TestReserveRefusesOversizedModel checks that a model larger than the
// device's memory is refused before any upload, naming what it needs and
// what the device has.
func TestReserveRefusesOversizedModel(t *testing.T) {
	e := open(t)
	defer e.Close()
	err := e.Reserve(1<<50, backend.Cache{Layers: 32, Context: 8192, KVDim: 1024})
	if err == nil {
		t.Fatal("a 1 PiB model was accepted")
	}
	for _, want := range []string{"needs 1101005.86 GiB", "weights 1048576.00 GiB", "KV cache 1.00 GiB at context 8192", "free"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	// Gemma 3's pattern: 5 of 6 layers keep rings of window + batch - 1 =
	// 1024 + 512 - 1 positions, counted as such.
	gemma := backend.Cache{Layers: 6, Context: 8192, KVDim: 1024, Batch: 512, Windows: []int{1024, 1024, 1024, 1024, 1024, 0}}
	err = e.Reserve(1<<50, gemma)
	if err == nil {
		t.Fatal("a 1 PiB model was accepted")
	}
	// 5·1535 + 8192 positions of 1024 values, f16, K and V.
	for _, want := range []string{"KV cache 62.0 MiB at context 8192, 5 of 6 layers in sliding-window rings: 15867 positions in all"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if err := e.Reserve(1<<20, backend.Cache{Layers: 1, Context: 16, KVDim: 8}); err != nil {
		t.Fatalf("a 1 MiB model was refused: %v", err)
	}
}

// reserveOnly stops model.Load right after the backend's Reserve
// accepts a model, so that a header with no weights (synth.Header) can be
// checked against the device's memory without being uploaded.
type reserveOnly struct{ backend.Backend }

var errReserved = errors.New("reserved; stopping before the upload")

func (r reserveOnly) Reserve(weightBytes uint64, c backend.Cache) error {
	if err := r.Backend.Reserve(weightBytes, c); err != nil {
		return err
	}
	return errReserved
}

// TestReserveQwen3MoE: on a device with 16 GiB free (lavapipe's 23.5 GiB
// capped, as a 16 GiB card), the qwen3-30b-a3b preset in Q4_K_M (17.28 GiB
// of weights; its totals as model.Load computes them from the header) is
// refused before any upload, in one line that says what it needs and what
// is free; qwen3-8b (4.7 GiB) is not.
func TestReserveQwen3MoE(t *testing.T) {
	e := open(t)
	defer e.Close()
	engine.LimitMemory(e, 16<<30)
	load := func(preset string) error {
		h, err := synth.Header("synth:" + preset)
		if err != nil {
			t.Fatal(err)
		}
		_, err = model.Load(h, reserveOnly{e}, model.Options{Context: 4096})
		return err
	}
	err := load("qwen3-30b-a3b")
	if err == nil || errors.Is(err, errReserved) {
		t.Fatalf("qwen3-30b-a3b on a 16 GiB device: %v, want a refusal", err)
	}
	// 48 layers · 4096 positions · 512 values · f16 K and V: 384 MiB.
	// Mesa 22.3's lavapipe offers only 2 GiB: the cap applies to what the
	// device has, and the message names what is free either way.
	if !strings.Contains(err.Error(), "16.00 GiB of device memory free") && !strings.Contains(err.Error(), "2.00 GiB of device memory free") {
		t.Errorf("error %q names neither the 16 GiB cap nor the device's 2 GiB", err)
	}
	small := strings.Contains(err.Error(), "2.00 GiB of device memory free")
	for _, want := range []string{"needs 18.5", "weights 17.28 GiB", "KV cache 384.0 MiB at context 4096"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("error %q is more than one line", err)
	}
	t.Log(err)
	if err := load("qwen3-8b"); small != !errors.Is(err, errReserved) {
		t.Errorf("qwen3-8b on a device with %s free: %v", map[bool]string{true: "2 GiB", false: "16 GiB"}[small], err)
	}
}

// TestTunedAttentionMisfit runs a model under a tuning profile whose
// attention choices (4 q-heads per workgroup) do not fit its GQA group of
// 2, as a profile measured on Llama-3 would not fit this model: the engine
// takes the policy's attention for it, says so once per mode, and its
// logits are those of the engine without a profile. Before, the model
// failed to build.
func TestTunedAttentionMisfit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tiny.gguf")
	if err := synth.Write(path, "tiny", "f16", 1, nil); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// ubatch 16: the prompt is a 16-query prefill, then a decode step.
	run := func(o engine.Options) []float32 { return forward(t, f, openWith(t, o), 16) }
	want := run(engine.Options{})
	var warn strings.Builder
	misfit := &tune.Profile{Decode: &tune.Attention{Heads: 4}, Prefill: &tune.Attention{Heads: 4}}
	got := run(engine.Options{Tune: misfit, Warn: &warn})
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("logit %d: %v under the misfit profile, %v without one", i, got[i], want[i])
		}
	}
	lines := strings.Split(strings.TrimSpace(warn.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "tuning profile's") || !strings.Contains(warn.String(), "decode attention") ||
		!strings.Contains(warn.String(), "prefill attention") {
		t.Errorf("want one warning for decode and one for prefill, got:\n%s", warn.String())
	}
}

// TestWaterfall profiles decode tokens of the tiny Q4_K_M model (f32 and
// 8-bit activations) and checks the waterfall's structure, not its
// timings: starts in submission order, no negative gap, the layers in
// order, the token's span the sum of its gaps and busy times, every
// weight read once (the embedding's one row of it), so the products'
// bytes add up to the file's weights, and at most 7 dispatches a layer.
func TestWaterfall(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tiny.gguf")
	if err := synth.Write(path, "tiny", "q4_k_m", 1, nil); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var want int64
	tied := true
	for _, tn := range f.Tensors() {
		if tn.Name == "output.weight" {
			tied = false
		}
	}
	for _, tn := range f.Tensors() {
		want += int64(tn.Bytes)
		if tn.Name == "token_embd.weight" {
			row, err := tn.Type.RowBytes(int(tn.Shape[0]))
			if err != nil {
				t.Fatal(err)
			}
			if want += int64(row) - int64(tn.Bytes); tied {
				want += int64(tn.Bytes)
			}
		}
	}
	for name, o := range map[string]engine.Options{"f32": f32, "int-dot": intDot} {
		t.Run(name, func(t *testing.T) {
			o.Profile = true
			e := openWith(t, o)
			m, err := model.Load(f, e, model.Options{Context: 64, UBatch: 8})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if e.Waterfall() != nil {
				t.Error("a waterfall before any token ran")
			}
			if _, err := m.Forward(prompt[:5], 0, false); err != nil {
				t.Fatal(err)
			}
			for pos := 5; pos < 7; pos++ {
				if _, err := m.Forward(prompt[pos:pos+1], pos, false); err != nil {
					t.Fatal(err)
				}
			}
			w := e.Waterfall()
			if w == nil || w.Pos != 6 || w.Layers != m.HP.Layers || len(w.Dispatches) == 0 {
				t.Fatalf("waterfall %+v, want the token at position 6 of %d layers", w, m.HP.Layers)
			}
			var weights int64
			var reach, sum float64
			layer := -1
			attention := 0
			for i, d := range w.Dispatches {
				switch {
				case i > 0 && d.Start < w.Dispatches[i-1].Start:
					t.Errorf("dispatch %d (%s) starts at %g µs, before the one before it", i, d.Name, d.Start)
				case d.Gap < 0 || d.Busy < 0 || d.End < d.Start:
					t.Errorf("dispatch %d: %+v", i, d)
				case d.Layer < layer || d.Layer > layer+1:
					t.Errorf("dispatch %d (%s) in layer %d after layer %d", i, d.Name, d.Layer, layer)
				case d.Bytes < d.Weights || d.Bytes <= 0:
					t.Errorf("dispatch %d (%s) reads %d bytes, %d of weights", i, d.Name, d.Bytes, d.Weights)
				case strings.HasPrefix(d.Name, "matvec") && d.Weights == 0:
					t.Errorf("dispatch %d (%s): a product that reads no weights", i, d.Name)
				}
				if strings.HasPrefix(d.Name, "flash_attn") {
					// K and V, f16, at positions 0..6.
					if kv := int64(2 * 2 * 7 * m.HP.KVHeads * m.HP.HeadDim); d.Bytes < kv {
						t.Errorf("dispatch %d (%s) reads %d bytes, less than the KV cache's %d", i, d.Name, d.Bytes, kv)
					}
					attention++
				}
				layer = d.Layer
				weights += d.Weights
				sum += d.Gap + d.Busy
				reach = max(reach, d.End)
			}
			// Issue 17's budget: at most 7 dispatches a layer, Q6_K v
			// layers too (their v joins the Q4_K q and k).
			perLayer := map[int]int{}
			for _, d := range w.Dispatches {
				perLayer[d.Layer]++
			}
			for l := range m.HP.Layers {
				if perLayer[l] > 7 {
					t.Errorf("layer %d: %d dispatches, want at most 7", l, perLayer[l])
				}
			}
			if layer != m.HP.Layers || attention != m.HP.Layers {
				t.Errorf("last layer %d, %d attention dispatches; want the output after %d layers of attention", layer, attention, m.HP.Layers)
			}
			if weights != want {
				t.Errorf("the token read %d bytes of weights, want %d", weights, want)
			}
			if math.Abs(sum-reach) > 1e-6*max(1, reach) {
				t.Errorf("gaps and busy times sum to %g µs, the token spans %g", sum, reach)
			}
			var b strings.Builder
			engine.WriteWaterfall(&b, w)
			t.Logf("%s", b.String())
		})
	}
}

// TestPrefillRepeats: the same prompt gives bit-identical logits on every
// run. A mixture of experts' prefill sorts its (token, expert) pairs with
// shared atomics (moe_sort.comp), so the order of an expert's pairs, and so
// the column each takes in its tile, varies from run to run; each column's
// sum runs over K alone, the same arithmetic in any column, so nothing
// computed may vary with it.
func TestPrefillRepeats(t *testing.T) {
	f, err := gguf.Open(fixtures.Path(t, "arch", "tiny-qwen3moe-q4_k_m.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	toks := make([]int32, 40)
	for i := range toks {
		toks[i] = int32(3 + (i*97+11)%500)
	}
	want := forwardPrompt(t, f, open(t), 32, toks)
	for run := range 3 {
		got := forwardPrompt(t, f, open(t), 32, toks)
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("run %d: logit %d is %v, the first run gave %v", run+2, i, got[i], want[i])
			}
		}
	}
}
