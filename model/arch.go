package model

import (
	"math"
	"slices"
	"strings"
)

// arch is how one architecture departs from the llama forward pass. The
// forward pass (build), the hyper-parameters and the weight binding read
// it; nothing else in the package names an architecture. Biases and a
// fused attn_qkv are taken where the file has them, whatever the
// architecture, as llama.cpp does.
type arch struct {
	// neox: RoPE rotates the halves (i, i+dims/2) of each head
	// (llama.cpp's LLAMA_ROPE_TYPE_NEOX) instead of adjacent pairs.
	neox bool
	// headNorms: attn_q_norm and attn_k_norm, an RMSNorm of every head
	// of Q and K before RoPE.
	headNorms bool
	// postNorms: post_attention_norm and post_ffw_norm, an RMSNorm of each
	// branch's output before its residual add.
	postNorms bool
	// gelu: the FFN is gelu(gate)·up (GeGLU) instead of silu(gate)·up.
	gelu bool
	// embedScale: embeddings are multiplied by √n_embd.
	embedScale bool
	// fusedGateUp: ffn_up holds the gate's rows, then the up projection's
	// (2·n_ff rows), and there is no ffn_gate.
	fusedGateUp bool
	// swaPattern > 0: when the file sets attention.sliding_window, layer l
	// is local (sliding window, rope.freq_base_swa) unless l % p == p-1,
	// with p = attention.sliding_window_pattern, this value by default.
	// 0: the architecture has no sliding-window layers.
	swaPattern int
	// attnScale multiplies q·k; nil means 1/√head_dim.
	attnScale func(hp *HParams) float64
	// moe: the FFN is a mixture of experts: a router (ffn_gate_inp, softmax
	// over expert_count experts, the top expert_used_count) and the
	// experts' stacked SwiGLU FFNs (ffn_{gate,up,down}_exps), as llama.cpp's
	// build_moe_ffn with softmax gating, no expert bias, no weight scale.
	moe bool
	// moeNorm: the chosen experts' weights are divided by their sum.
	// llama.cpp fixes it per architecture (qwen3moe: on) and reads no key
	// for it (expert_weights_norm is another family's).
	moeNorm bool
}

// archs is every architecture Load accepts.
var archs = map[string]arch{
	"llama":   {},
	"mistral": {},
	"qwen2":   {neox: true},
	"qwen3":   {neox: true, headNorms: true},
	"gemma3": {neox: true, headNorms: true, postNorms: true, gelu: true, embedScale: true, swaPattern: 6,
		attnScale: gemma3AttnScale},
	"phi3":     {neox: true, fusedGateUp: true},
	"qwen3moe": {neox: true, headNorms: true, moe: true, moeNorm: true},
}

// gemma3AttnScale is Gemma 3's query scale: 1/√(n_embd/n_head) for the
// 27B (62 layers, whose heads are narrower than n_embd/n_head), 1/√head_dim
// for the others, as llama.cpp and gemma_pytorch set it.
func gemma3AttnScale(hp *HParams) float64 {
	if hp.Layers == 62 {
		return 1 / math.Sqrt(float64(hp.Embd/hp.Heads))
	}
	return 1 / math.Sqrt(float64(hp.HeadDim))
}

// supported lists the architectures of archs, sorted, for error messages.
func supported() string {
	names := make([]string, 0, len(archs))
	for n := range archs {
		names = append(names, n)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}
