// Package model holds the transformer architectures (llama, mistral, qwen2,
// qwen3, gemma3, phi3, qwen3moe): hyper-parameters read from GGUF metadata, weights
// bound by tensor name, and one forward pass, written once against the
// backend op interface and steered by a small description per architecture
// (arch.go).
package model

import (
	"fmt"
	"math"

	"github.com/vkinfer/vkinfer/gguf"
)

// HParams are the hyper-parameters of a model.
type HParams struct {
	Arch      string
	Context   int // trained context length
	Embd      int
	Layers    int
	FF        int
	Heads     int
	KVHeads   int
	HeadDim   int
	RopeDims  int
	RopeBase  float32
	RopeScale float32 // position multiplier: 1/factor for linear scaling
	RopeNeoX  bool
	GELU      bool // the FFN is gelu(gate)·up (GeGLU), not silu(gate)·up
	Eps       float32
	AttnScale float32 // multiplies q·k
	Vocab     int     // rows of token_embd
	// Windows holds each layer's sliding attention window, 0 for a global
	// layer; nil when the model has no sliding-window layers.
	Windows []int
	// RopeBaseSWA and RopeScaleSWA replace RopeBase and RopeScale on
	// sliding-window layers (Gemma 3: rope.freq_base_swa, no scaling).
	RopeBaseSWA, RopeScaleSWA float32
	// Experts, ExpertsUsed and ExpertFF shape a mixture-of-experts FFN
	// (qwen3moe): experts per layer, experts each token runs, and each
	// expert's hidden size. Experts is 0 for a dense FFN.
	Experts, ExpertsUsed, ExpertFF int
	ExpertNorm                     bool // the chosen experts' weights are renormalised
}

// Window is layer l's sliding attention window, 0 for a global layer.
func (hp *HParams) Window(l int) int {
	if l < len(hp.Windows) {
		return hp.Windows[l]
	}
	return 0
}

// Rope returns the RoPE base and position scale of layer l.
func (hp *HParams) Rope(l int) (base, scale float32) {
	if hp.Window(l) > 0 {
		return hp.RopeBaseSWA, hp.RopeScaleSWA
	}
	return hp.RopeBase, hp.RopeScale
}

// ReadHParams reads and checks the hyper-parameters of f.
func ReadHParams(f *gguf.File) (HParams, error) {
	arch := f.Arch()
	if arch == "" {
		return HParams{}, fmt.Errorf("model: general.architecture is missing")
	}
	a, ok := archs[arch]
	if !ok {
		return HParams{}, fmt.Errorf("model: unsupported architecture %q (supported: %s)", arch, supported())
	}
	hp := HParams{Arch: arch, RopeNeoX: a.neox, GELU: a.gelu}
	var err error
	need := func(key string) int {
		v, ok := f.Uint(arch + "." + key)
		if err == nil && (!ok || v == 0 || v > 1<<24) {
			err = fmt.Errorf("model: required key %s.%s is missing or out of range", arch, key)
		}
		return int(v)
	}
	opt := func(key string, def int) int {
		if v, ok := f.Uint(arch + "." + key); ok && v > 0 && v <= 1<<24 {
			return int(v)
		}
		return def
	}
	hp.Context = need("context_length")
	hp.Embd = need("embedding_length")
	hp.Layers = need("block_count")
	if !a.moe {
		hp.FF = need("feed_forward_length")
	}
	hp.Heads = need("attention.head_count")
	if a.moe {
		hp.FF = opt("feed_forward_length", 0) // no tensor has it; the experts' size may derive from it
		hp.Experts = need("expert_count")
		hp.ExpertsUsed = need("expert_used_count")
		hp.ExpertNorm = a.moeNorm
	}
	if err != nil {
		return HParams{}, err
	}
	if a.moe {
		// As llama.cpp: without expert_feed_forward_length, the dense size
		// is shared among the experts a token uses.
		hp.ExpertFF = opt("expert_feed_forward_length", hp.FF/hp.ExpertsUsed)
		switch {
		case hp.ExpertsUsed > hp.Experts:
			return HParams{}, fmt.Errorf("model: %s.expert_used_count %d exceeds expert_count %d", arch, hp.ExpertsUsed, hp.Experts)
		case hp.ExpertFF == 0:
			return HParams{}, fmt.Errorf("model: required key %s.expert_feed_forward_length is missing or out of range", arch)
		}
	}
	hp.KVHeads = opt("attention.head_count_kv", hp.Heads)
	hp.HeadDim = opt("attention.key_length", hp.Embd/hp.Heads)
	if v := opt("attention.value_length", hp.HeadDim); v != hp.HeadDim {
		return HParams{}, fmt.Errorf("model: value head dim %d differs from key head dim %d (unsupported)", v, hp.HeadDim)
	}
	hp.RopeDims = opt("rope.dimension_count", hp.HeadDim)
	eps, ok := f.Float(arch + ".attention.layer_norm_rms_epsilon")
	if !ok || eps <= 0 || eps >= 1 {
		return HParams{}, fmt.Errorf("model: required key %s.attention.layer_norm_rms_epsilon is missing or out of range", arch)
	}
	hp.Eps = float32(eps)
	hp.RopeBase = 10000
	if b, ok := f.Float(arch + ".rope.freq_base"); ok {
		hp.RopeBase = float32(b)
	}
	hp.RopeScale = 1
	if t, _ := f.String(arch + ".rope.scaling.type"); t != "" && t != "none" {
		factor, _ := f.Float(arch + ".rope.scaling.factor")
		switch {
		case t == "linear" && factor > 0:
			hp.RopeScale = float32(1 / factor)
		case t == "linear":
			return HParams{}, fmt.Errorf("model: linear rope scaling without a positive %s.rope.scaling.factor", arch)
		default:
			return HParams{}, fmt.Errorf("model: unsupported rope scaling type %q (supported: linear)", t)
		}
	}
	for _, key := range []string{"final_logit_softcapping", "attn_logit_softcapping"} {
		if v, ok := f.Float(arch + "." + key); ok && v != 0 {
			return HParams{}, fmt.Errorf("model: %s.%s is not supported", arch, key)
		}
	}
	if err := readWindows(f, a, &hp); err != nil {
		return HParams{}, err
	}
	hp.AttnScale = float32(1 / math.Sqrt(float64(hp.HeadDim)))
	if a.attnScale != nil {
		hp.AttnScale = float32(a.attnScale(&hp))
	}
	switch {
	case hp.Heads%hp.KVHeads != 0:
		return HParams{}, fmt.Errorf("model: %d attention heads are not a multiple of %d KV heads", hp.Heads, hp.KVHeads)
	case hp.RopeDims > hp.HeadDim || hp.RopeDims%2 != 0:
		return HParams{}, fmt.Errorf("model: rope dimension count %d does not fit head dim %d", hp.RopeDims, hp.HeadDim)
	case !validBase(hp.RopeBase) || !validBase(hp.RopeBaseSWA):
		return HParams{}, fmt.Errorf("model: rope freq base %g out of range", hp.RopeBase)
	}
	return hp, nil
}

// readWindows sets the sliding windows of an architecture that has them
// when the file gives one (attention.sliding_window), as llama.cpp's
// set_swa_pattern lays them out: with pattern p, layer l is local unless
// l % p == p-1; p == 0 makes every layer local.
func readWindows(f *gguf.File, a arch, hp *HParams) error {
	hp.RopeBaseSWA, hp.RopeScaleSWA = 10000, 1
	if a.swaPattern == 0 {
		return nil
	}
	w, _ := f.Uint(hp.Arch + ".attention.sliding_window")
	if w == 0 {
		return nil
	}
	if w > 1<<24 {
		return fmt.Errorf("model: %s.attention.sliding_window %d out of range", hp.Arch, w)
	}
	key := hp.Arch + ".attention.sliding_window_pattern"
	p, ok := f.Uint(key)
	switch {
	case !f.Has(key):
		p = uint64(a.swaPattern)
	case !ok:
		return fmt.Errorf("model: %s is not a single integer (per-layer patterns are not supported)", key)
	}
	hp.Windows = make([]int, hp.Layers)
	for l := range hp.Windows {
		if p == 0 || uint64(l)%p < p-1 {
			hp.Windows[l] = int(w)
		}
	}
	if b, ok := f.Float(hp.Arch + ".rope.freq_base_swa"); ok {
		hp.RopeBaseSWA = float32(b)
	}
	return nil
}

func validBase(b float32) bool {
	return b > 0 && !math.IsInf(float64(b), 0) && !math.IsNaN(float64(b))
}
