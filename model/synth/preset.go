package synth

import (
	"fmt"
	"strings"
)

// preset is the geometry of a real checkpoint (or, for tiny, of a model small
// enough for CI). Only what shapes the tensors and the metadata is kept.
type preset struct {
	name     string
	arch     string // general.architecture: also the prefix of the hyper-parameter keys
	nEmbd    uint64
	nFF      uint64
	nLayer   int
	nHead    uint64
	nKV      uint64
	headDim  uint64
	nVocab   int
	ctx      uint32
	ropeBase float32
	eps      float32
	qkvBias  bool // qwen2 has biases on the q, k and v projections
	tied     bool // no output.weight: the output reuses token_embd.weight
}

// presets is the table behind --preset and synth:PRESET. The two tiny ones
// are small enough for CI. tiny keeps every contiguous dimension a multiple
// of 256 so that all three mixes use the K-quants they are meant to, and has
// four layers so that its Q4_K_M mix holds both Q4_K and Q6_K layers.
// tiny-qwen2 is qwen2.5-0.5b in miniature: q/k/v biases, tied embeddings and
// an n_embd (384) that is not a multiple of 256, so the K-quant fallback
// shows up as it does in the real model.
var presets = []preset{
	{name: "tiny", arch: "llama", nEmbd: 256, nFF: 768, nLayer: 4, nHead: 8, nKV: 4, headDim: 32,
		nVocab: 1024, ctx: 2048, ropeBase: 10000, eps: 1e-5},
	{name: "tiny-qwen2", arch: "qwen2", nEmbd: 384, nFF: 1024, nLayer: 2, nHead: 6, nKV: 2, headDim: 64,
		nVocab: 1024, ctx: 2048, ropeBase: 1e6, eps: 1e-6, qkvBias: true, tied: true},
	{name: "llama3-8b", arch: "llama", nEmbd: 4096, nFF: 14336, nLayer: 32, nHead: 32, nKV: 8, headDim: 128,
		nVocab: 128256, ctx: 8192, ropeBase: 500000, eps: 1e-5},
	{name: "llama2-7b", arch: "llama", nEmbd: 4096, nFF: 11008, nLayer: 32, nHead: 32, nKV: 32, headDim: 128,
		nVocab: 32000, ctx: 4096, ropeBase: 10000, eps: 1e-5},
	{name: "qwen2.5-0.5b", arch: "qwen2", nEmbd: 896, nFF: 4864, nLayer: 24, nHead: 14, nKV: 2, headDim: 64,
		nVocab: 151936, ctx: 32768, ropeBase: 1e6, eps: 1e-6, qkvBias: true, tied: true},
}

// Presets lists the preset names in table order.
func Presets() []string {
	names := make([]string, len(presets))
	for i, p := range presets {
		names[i] = p.name
	}
	return names
}

func lookupPreset(name string) (*preset, error) {
	for i := range presets {
		if strings.EqualFold(presets[i].name, name) {
			return &presets[i], nil
		}
	}
	return nil, fmt.Errorf("unknown preset %q (valid: %s)", name, strings.Join(Presets(), ", "))
}

// kind is what a tensor does; the type mix and the weight distribution
// depend on it.
type kind int

const (
	kindEmbed   kind = iota // token_embd.weight
	kindMatrix              // projections with no special rule in the mix
	kindAttnV               // attn_v.weight: Q6_K in some layers of Q4_K_M
	kindFFNDown             // ffn_down.weight: likewise
	kindOutput              // output.weight: Q6_K in Q4_K_M
	kindNorm                // RMS norm weights
	kindBias                // q/k/v biases
)

// tensorSpec is one tensor of a preset, before a type is chosen.
type tensorSpec struct {
	name  string
	kind  kind
	layer int      // block index; -1 outside the blocks
	shape []uint64 // GGML order: ne0 (the input, contiguous dimension) first
}

// tensors lists the tensors of p with llama.cpp's names and shapes.
func (p *preset) tensors() []tensorSpec {
	var (
		e, ff, v = p.nEmbd, p.nFF, uint64(p.nVocab)
		q        = p.nHead * p.headDim
		kv       = p.nKV * p.headDim
	)
	ts := []tensorSpec{{name: "token_embd.weight", kind: kindEmbed, layer: -1, shape: []uint64{e, v}}}
	for i := range p.nLayer {
		add := func(name string, k kind, shape ...uint64) {
			ts = append(ts, tensorSpec{name: fmt.Sprintf("blk.%d.%s", i, name), kind: k, layer: i, shape: shape})
		}
		add("attn_norm.weight", kindNorm, e)
		add("attn_q.weight", kindMatrix, e, q)
		add("attn_k.weight", kindMatrix, e, kv)
		add("attn_v.weight", kindAttnV, e, kv)
		if p.qkvBias {
			add("attn_q.bias", kindBias, q)
			add("attn_k.bias", kindBias, kv)
			add("attn_v.bias", kindBias, kv)
		}
		add("attn_output.weight", kindMatrix, q, e)
		add("ffn_norm.weight", kindNorm, e)
		add("ffn_gate.weight", kindMatrix, e, ff)
		add("ffn_up.weight", kindMatrix, e, ff)
		add("ffn_down.weight", kindFFNDown, ff, e)
	}
	ts = append(ts, tensorSpec{name: "output_norm.weight", kind: kindNorm, layer: -1, shape: []uint64{e}})
	if !p.tied {
		ts = append(ts, tensorSpec{name: "output.weight", kind: kindOutput, layer: -1, shape: []uint64{e, v}})
	}
	return ts
}
