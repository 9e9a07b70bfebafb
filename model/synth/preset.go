package synth

import (
	"fmt"
	"math"
	"strings"
)

// preset is the geometry of a real checkpoint (or, for the tiny ones, of a
// model small enough for CI). Only what shapes the tensors and the metadata
// is kept.
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

	// Later families' layouts.
	qkNorm      bool    // qwen3, gemma3: attn_q_norm and attn_k_norm, one head long, before RoPE
	postNorms   bool    // gemma3: post_attention_norm and post_ffw_norm on each branch's output
	fused       bool    // phi3: attn_qkv (Q, K and V rows stacked) and ffn_up holding the gate and up rows
	headKeys    bool    // attention.key_length and value_length, written where the config has a head_dim
	window      uint32  // attention.sliding_window (0: none)
	swaPattern  uint32  // gemma3: every swaPattern-th layer is global, the others slide (0: no pattern key)
	ropeBaseSWA float32 // gemma3: rope.freq_base_swa, the RoPE base of the sliding layers
	ropeLinear  float32 // rope.scaling.type linear with this factor (0: none; gemma3-4b's global layers)
	ropeOrigCtx uint32  // rope.scaling.original_context_length (0: none)
	llama3Rope  *llama3Rope

	// A mixture of experts (qwen3moe): each layer's FFN is nExpert SwiGLU
	// experts of hidden size nFFExp stacked in 3-D tensors, with a router
	// (ffn_gate_inp) choosing nExpertUsed of them per token. nFF is then
	// the checkpoint's dense intermediate_size, written as
	// feed_forward_length but shaping no tensor.
	nExpert, nExpertUsed, nFFExp uint64

	tokenizer *tokenizerKind
	nText     int // generated tokens of the vocabulary (0: all that the specials leave)
}

// llama3Rope is Llama 3.1/3.2's rope scaling, which the converter turns into
// the rope_freqs.weight frequency divisors.
type llama3Rope struct {
	factor, lowFreqFactor, highFreqFactor float64
	origCtx                               float64
}

// presets is the table behind --preset and synth:PRESET, geometries from the
// checkpoints' config.json (the text model of Gemma 3 4B).
//
// The tiny ones are small enough for CI. tiny keeps every contiguous
// dimension a multiple of 256 so that all three mixes use the K-quants they
// are meant to, and has four layers so that its Q4_K_M mix holds both Q4_K
// and Q6_K layers. tiny-qwen2 is qwen2.5-0.5b in miniature: q/k/v biases,
// tied embeddings and an n_embd (384) that is not a multiple of 256, so the
// K-quant fallback shows up as it does in the real model. tiny-qwen3,
// tiny-gemma3, tiny-phi3 and tiny-llama3.2 have their families' layouts and
// tokenizers with real head dims (128, 256, 96, 32 with a head dim that is
// not n_embd/heads for qwen3 and gemma3); tiny-gemma3 slides a window of 16
// on five of its six layers and scales RoPE linearly on the sixth, as
// gemma3-4b does. tiny-qwen3moe is qwen3-30b-a3b in miniature: 16 experts of
// which 4 run per token (not 8 experts: llama.cpp's Q4_K_M mix has extra
// rules for exactly 8, which no real preset needs), whole K-quant rows.
var presets = []preset{
	{name: "tiny", arch: "llama", nEmbd: 256, nFF: 768, nLayer: 4, nHead: 8, nKV: 4, headDim: 32,
		nVocab: 1024, ctx: 2048, ropeBase: 10000, eps: 1e-5, tokenizer: &spmLlama},
	{name: "tiny-qwen2", arch: "qwen2", nEmbd: 384, nFF: 1024, nLayer: 2, nHead: 6, nKV: 2, headDim: 64,
		nVocab: 1024, ctx: 2048, ropeBase: 1e6, eps: 1e-6, qkvBias: true, tied: true, tokenizer: &spmLlama},
	{name: "tiny-qwen3", arch: "qwen3", nEmbd: 256, nFF: 768, nLayer: 4, nHead: 4, nKV: 2, headDim: 128,
		nVocab: 1024, nText: 990, ctx: 4096, ropeBase: 1e6, eps: 1e-6, tied: true, qkNorm: true, headKeys: true,
		tokenizer: &bpeQwen},
	{name: "tiny-gemma3", arch: "gemma3", nEmbd: 256, nFF: 768, nLayer: 6, nHead: 4, nKV: 1, headDim: 256,
		nVocab: 1024, ctx: 4096, ropeBase: 1e6, eps: 1e-6, tied: true, qkNorm: true, postNorms: true, headKeys: true,
		window: 16, swaPattern: 6, ropeBaseSWA: 1e4, ropeLinear: 8, tokenizer: &spmGemma3},
	{name: "tiny-phi3", arch: "phi3", nEmbd: 768, nFF: 1024, nLayer: 3, nHead: 8, nKV: 8, headDim: 96,
		nVocab: 1024, nText: 1000, ctx: 4096, ropeBase: 10000, eps: 1e-5, fused: true, window: 2047, ropeOrigCtx: 4096,
		tokenizer: &spmPhi3},
	{name: "tiny-llama3.2", arch: "llama", nEmbd: 256, nFF: 768, nLayer: 4, nHead: 8, nKV: 2, headDim: 32,
		nVocab: 1024, nText: 768, ctx: 131072, ropeBase: 500000, eps: 1e-5, tied: true, headKeys: true,
		llama3Rope: &llama3Rope{factor: 32, lowFreqFactor: 1, highFreqFactor: 4, origCtx: 8192}, tokenizer: &bpeLlama3},
	{name: "tiny-qwen3moe", arch: "qwen3moe", nEmbd: 256, nFF: 768, nLayer: 4, nHead: 4, nKV: 2, headDim: 128,
		nVocab: 1024, nText: 990, ctx: 4096, ropeBase: 1e6, eps: 1e-6, qkNorm: true, headKeys: true,
		nExpert: 16, nExpertUsed: 4, nFFExp: 256, tokenizer: &bpeQwen},

	{name: "llama3-8b", arch: "llama", nEmbd: 4096, nFF: 14336, nLayer: 32, nHead: 32, nKV: 8, headDim: 128,
		nVocab: 128256, ctx: 8192, ropeBase: 500000, eps: 1e-5, tokenizer: &spmLlama},
	{name: "llama2-7b", arch: "llama", nEmbd: 4096, nFF: 11008, nLayer: 32, nHead: 32, nKV: 32, headDim: 128,
		nVocab: 32000, ctx: 4096, ropeBase: 10000, eps: 1e-5, tokenizer: &spmLlama},
	{name: "qwen2.5-0.5b", arch: "qwen2", nEmbd: 896, nFF: 4864, nLayer: 24, nHead: 14, nKV: 2, headDim: 64,
		nVocab: 151936, ctx: 32768, ropeBase: 1e6, eps: 1e-6, qkvBias: true, tied: true, tokenizer: &spmLlama},
	{name: "qwen3-0.6b", arch: "qwen3", nEmbd: 1024, nFF: 3072, nLayer: 28, nHead: 16, nKV: 8, headDim: 128,
		nVocab: 151936, nText: 151643, ctx: 40960, ropeBase: 1e6, eps: 1e-6, tied: true, qkNorm: true, headKeys: true,
		tokenizer: &bpeQwen},
	{name: "qwen3-8b", arch: "qwen3", nEmbd: 4096, nFF: 12288, nLayer: 36, nHead: 32, nKV: 8, headDim: 128,
		nVocab: 151936, nText: 151643, ctx: 40960, ropeBase: 1e6, eps: 1e-6, qkNorm: true, headKeys: true,
		tokenizer: &bpeQwen},
	{name: "gemma3-1b", arch: "gemma3", nEmbd: 1152, nFF: 6912, nLayer: 26, nHead: 4, nKV: 1, headDim: 256,
		nVocab: 262144, ctx: 32768, ropeBase: 1e6, eps: 1e-6, tied: true, qkNorm: true, postNorms: true, headKeys: true,
		window: 512, swaPattern: 6, ropeBaseSWA: 1e4, tokenizer: &spmGemma3},
	{name: "gemma3-4b", arch: "gemma3", nEmbd: 2560, nFF: 10240, nLayer: 34, nHead: 8, nKV: 4, headDim: 256,
		nVocab: 262144, ctx: 131072, ropeBase: 1e6, eps: 1e-6, tied: true, qkNorm: true, postNorms: true, headKeys: true,
		window: 1024, swaPattern: 6, ropeBaseSWA: 1e4, ropeLinear: 8, tokenizer: &spmGemma3},
	{name: "phi3-mini", arch: "phi3", nEmbd: 3072, nFF: 8192, nLayer: 32, nHead: 32, nKV: 32, headDim: 96,
		nVocab: 32064, nText: 31997, ctx: 4096, ropeBase: 10000, eps: 1e-5, fused: true, window: 2047, ropeOrigCtx: 4096,
		tokenizer: &spmPhi3},
	{name: "llama3.2-1b", arch: "llama", nEmbd: 2048, nFF: 8192, nLayer: 16, nHead: 32, nKV: 8, headDim: 64,
		nVocab: 128256, nText: 128000, ctx: 131072, ropeBase: 500000, eps: 1e-5, tied: true, headKeys: true,
		llama3Rope: &llama3Rope{factor: 32, lowFreqFactor: 1, highFreqFactor: 4, origCtx: 8192}, tokenizer: &bpeLlama3},
	{name: "qwen3-30b-a3b", arch: "qwen3moe", nEmbd: 2048, nFF: 6144, nLayer: 48, nHead: 32, nKV: 4, headDim: 128,
		nVocab: 151936, nText: 151643, ctx: 40960, ropeBase: 1e6, eps: 1e-6, qkNorm: true, headKeys: true,
		nExpert: 128, nExpertUsed: 8, nFFExp: 768, tokenizer: &bpeQwen},
}

// textTokens is how many tokens of p's vocabulary are generated rather than
// special or padding.
func (p *preset) textTokens() int {
	if p.nText > 0 {
		return p.nText
	}
	return p.nVocab - len(p.tokenizer.head) - len(p.tokenizer.tail)
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
	kindEmbed     kind = iota // token_embd.weight
	kindMatrix                // projections with no special rule in the mix
	kindAttnV                 // attn_v.weight and the fused attn_qkv.weight: Q6_K in some layers of Q4_K_M
	kindFFNDown               // ffn_down.weight: likewise
	kindOutput                // output.weight: Q6_K in Q4_K_M
	kindNorm                  // RMS norm weights
	kindBias                  // q/k/v biases
	kindRopeFreqs             // rope_freqs.weight: computed, not drawn (see tensorSpec.values)
	kindRouter                // ffn_gate_inp.weight: F32 in every mix, as the converter writes it and the quantizer keeps it
)

// tensorSpec is one tensor of a preset, before a type is chosen.
type tensorSpec struct {
	name   string
	kind   kind
	layer  int       // block index; -1 outside the blocks
	shape  []uint64  // GGML order: ne0 (the input, contiguous dimension) first
	values []float32 // the contents of a tensor that is data, not weights (F32)
}

// tensors lists the tensors of p with llama.cpp's names and shapes, in the
// converter's order.
func (p *preset) tensors() []tensorSpec {
	var (
		e, ff, v = p.nEmbd, p.nFF, uint64(p.nVocab)
		q        = p.nHead * p.headDim
		kv       = p.nKV * p.headDim
	)
	var ts []tensorSpec
	if r := p.llama3Rope; r != nil {
		ts = append(ts, tensorSpec{name: "rope_freqs.weight", kind: kindRopeFreqs, layer: -1,
			shape: []uint64{p.headDim / 2}, values: r.factors(float64(p.ropeBase), int(p.headDim))})
	}
	ts = append(ts, tensorSpec{name: "token_embd.weight", kind: kindEmbed, layer: -1, shape: []uint64{e, v}})
	for i := range p.nLayer {
		add := func(name string, k kind, shape ...uint64) {
			ts = append(ts, tensorSpec{name: fmt.Sprintf("blk.%d.%s", i, name), kind: k, layer: i, shape: shape})
		}
		add("attn_norm.weight", kindNorm, e)
		if p.fused {
			add("attn_qkv.weight", kindAttnV, e, q+2*kv)
		} else {
			add("attn_q.weight", kindMatrix, e, q)
			add("attn_k.weight", kindMatrix, e, kv)
			add("attn_v.weight", kindAttnV, e, kv)
		}
		if p.qkvBias {
			add("attn_q.bias", kindBias, q)
			add("attn_k.bias", kindBias, kv)
			add("attn_v.bias", kindBias, kv)
		}
		if p.qkNorm {
			add("attn_q_norm.weight", kindNorm, p.headDim)
			add("attn_k_norm.weight", kindNorm, p.headDim)
		}
		add("attn_output.weight", kindMatrix, q, e)
		if p.postNorms {
			add("post_attention_norm.weight", kindNorm, e)
		}
		add("ffn_norm.weight", kindNorm, e)
		switch {
		case p.nExpert > 0:
			// The converter's layout: expert e's rows follow expert
			// e-1's along the third dimension (ne2).
			add("ffn_gate_inp.weight", kindRouter, e, p.nExpert)
			add("ffn_gate_exps.weight", kindMatrix, e, p.nFFExp, p.nExpert)
			add("ffn_up_exps.weight", kindMatrix, e, p.nFFExp, p.nExpert)
			add("ffn_down_exps.weight", kindFFNDown, p.nFFExp, e, p.nExpert)
		case p.fused:
			add("ffn_up.weight", kindMatrix, e, 2*ff)
			add("ffn_down.weight", kindFFNDown, ff, e)
		default:
			add("ffn_gate.weight", kindMatrix, e, ff)
			add("ffn_up.weight", kindMatrix, e, ff)
			add("ffn_down.weight", kindFFNDown, ff, e)
		}
		if p.postNorms {
			add("post_ffw_norm.weight", kindNorm, e)
		}
	}
	ts = append(ts, tensorSpec{name: "output_norm.weight", kind: kindNorm, layer: -1, shape: []uint64{e}})
	if !p.tied {
		ts = append(ts, tensorSpec{name: "output.weight", kind: kindOutput, layer: -1, shape: []uint64{e, v}})
	}
	return ts
}

// factors are the rope_freqs.weight values for a head of dim values and
// RoPE base: the divisor of each rotary frequency, as convert_hf_to_gguf
// computes them for rope_type "llama3": 1 for wavelengths below
// origCtx/highFreqFactor, factor above origCtx/lowFreqFactor, and a smooth
// blend between.
func (r *llama3Rope) factors(base float64, dim int) []float32 {
	lowWavelen, highWavelen := r.origCtx/r.lowFreqFactor, r.origCtx/r.highFreqFactor
	out := make([]float32, dim/2)
	for i := range out {
		freq := 1 / math.Pow(base, float64(2*i)/float64(dim))
		switch wavelen := 2 * math.Pi / freq; {
		case wavelen < highWavelen:
			out[i] = 1
		case wavelen > lowWavelen:
			out[i] = float32(r.factor)
		default:
			smooth := (r.origCtx/wavelen - r.lowFreqFactor) / (r.highFreqFactor - r.lowFreqFactor)
			out[i] = float32(1 / ((1-smooth)/r.factor + smooth))
		}
	}
	return out
}
