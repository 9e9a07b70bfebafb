// Package model holds the llama-family architecture: hyper-parameters read
// from GGUF metadata, weights bound by tensor name, and the forward pass,
// written once against the backend op interface.
package model

import (
	"fmt"
	"math"

	"github.com/vkinfer/vkinfer/gguf"
)

// HParams are the hyper-parameters of a llama-family model.
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
	Eps       float32
	Vocab     int // rows of token_embd
}

// archs lists the supported architectures and whether each rotates NeoX-style
// halves (as llama.cpp's LLAMA_ROPE_TYPE_NEOX) or adjacent pairs.
var archs = map[string]struct{ neox bool }{
	"llama":   {false},
	"mistral": {false},
	"qwen2":   {true},
}

// ReadHParams reads and checks the hyper-parameters of f.
func ReadHParams(f *gguf.File) (HParams, error) {
	arch := f.Arch()
	if arch == "" {
		return HParams{}, fmt.Errorf("model: general.architecture is missing")
	}
	a, ok := archs[arch]
	if !ok {
		return HParams{}, fmt.Errorf("model: unsupported architecture %q (supported: llama, mistral, qwen2)", arch)
	}
	hp := HParams{Arch: arch, RopeNeoX: a.neox}
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
	hp.FF = need("feed_forward_length")
	hp.Heads = need("attention.head_count")
	if err != nil {
		return HParams{}, err
	}
	hp.KVHeads = opt("attention.head_count_kv", hp.Heads)
	hp.HeadDim = opt("attention.key_length", hp.Embd/hp.Heads)
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
	switch {
	case hp.Heads%hp.KVHeads != 0:
		return HParams{}, fmt.Errorf("model: %d attention heads are not a multiple of %d KV heads", hp.Heads, hp.KVHeads)
	case hp.RopeDims > hp.HeadDim || hp.RopeDims%2 != 0:
		return HParams{}, fmt.Errorf("model: rope dimension count %d does not fit head dim %d", hp.RopeDims, hp.HeadDim)
	case hp.RopeBase <= 0 || math.IsInf(float64(hp.RopeBase), 0) || math.IsNaN(float64(hp.RopeBase)):
		return HParams{}, fmt.Errorf("model: rope freq base %g out of range", hp.RopeBase)
	}
	return hp, nil
}
