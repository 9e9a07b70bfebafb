package synth

import (
	"fmt"

	"github.com/vkinfer/vkinfer/gguf"
)

// quantizationVersion is GGML_QNT_VERSION; convert_hf_to_gguf and
// llama-quantize both record it.
const quantizationVersion = 2

// metadata returns the key/values of a file of preset p in mix f: the
// hyper-parameters under the keys convert_hf_to_gguf writes for p's family,
// and its tokenizer. It fails only for a preset whose vocabulary cannot be
// laid out (a bug in the table, which the tests catch).
func (p *preset) metadata(f *ftype) ([]gguf.KV, error) {
	a := p.arch + "."
	kvs := []gguf.KV{
		{Key: "general.architecture", Value: p.arch},
		{Key: "general.name", Value: fmt.Sprintf("vkinfer synthetic %s %s", p.name, f.name)},
		{Key: "general.file_type", Value: f.fileType},
		{Key: "general.quantization_version", Value: uint32(quantizationVersion)},
	}
	add := func(key string, v any) { kvs = append(kvs, gguf.KV{Key: a + key, Value: v}) }
	// The converter writes vocab_size for llama only; the qwen2 presets
	// have carried it since they were added, and keep it so that their
	// cached files stay what Write makes.
	if p.arch == "llama" || p.arch == "qwen2" {
		add("vocab_size", uint32(p.nVocab))
	}
	add("context_length", p.ctx)
	add("embedding_length", uint32(p.nEmbd))
	add("block_count", uint32(p.nLayer))
	add("feed_forward_length", uint32(p.nFF))
	add("attention.head_count", uint32(p.nHead))
	add("attention.head_count_kv", uint32(p.nKV))
	add("attention.layer_norm_rms_epsilon", p.eps)
	if p.nExpert > 0 {
		add("expert_count", uint32(p.nExpert))
		add("expert_used_count", uint32(p.nExpertUsed))
		add("expert_feed_forward_length", uint32(p.nFFExp))
	}
	// qwen3, qwen3moe and gemma3 leave the rotary dimension to the head size.
	if p.arch != "qwen3" && p.arch != "qwen3moe" && p.arch != "gemma3" {
		add("rope.dimension_count", uint32(p.headDim))
	}
	add("rope.freq_base", p.ropeBase)
	if p.headKeys {
		add("attention.key_length", uint32(p.headDim))
		add("attention.value_length", uint32(p.headDim))
	}
	if p.window > 0 {
		add("attention.sliding_window", p.window)
	}
	if p.swaPattern > 0 {
		add("attention.sliding_window_pattern", p.swaPattern)
		add("rope.freq_base_swa", p.ropeBaseSWA)
	}
	if p.ropeLinear > 0 {
		add("rope.scaling.type", "linear")
		add("rope.scaling.factor", p.ropeLinear)
	}
	if p.ropeOrigCtx > 0 {
		add("rope.scaling.original_context_length", p.ropeOrigCtx)
	}

	k := p.tokenizer
	v, err := k.build(p.nVocab, p.textTokens())
	if err != nil {
		return nil, err
	}
	kvs = append(kvs, gguf.KV{Key: "tokenizer.ggml.model", Value: k.model})
	if k.pre != "" {
		kvs = append(kvs, gguf.KV{Key: "tokenizer.ggml.pre", Value: k.pre})
	}
	kvs = append(kvs, gguf.KV{Key: "tokenizer.ggml.tokens", Value: v.tokens})
	if v.scores != nil {
		kvs = append(kvs, gguf.KV{Key: "tokenizer.ggml.scores", Value: v.scores})
	}
	kvs = append(kvs, gguf.KV{Key: "tokenizer.ggml.token_type", Value: v.types})
	if v.merges != nil {
		kvs = append(kvs, gguf.KV{Key: "tokenizer.ggml.merges", Value: v.merges})
	}
	for _, id := range []struct{ key, text string }{
		{"bos", k.bos}, {"eos", k.eos}, {"unknown", k.unk}, {"padding", k.pad},
	} {
		if id.text == "" {
			continue
		}
		i := k.id(id.text, p.textTokens())
		if i < 0 {
			return nil, fmt.Errorf("%s token %q is not in the vocabulary", id.key, id.text)
		}
		kvs = append(kvs, gguf.KV{Key: "tokenizer.ggml." + id.key + "_token_id", Value: uint32(i)})
	}
	kvs = append(kvs,
		gguf.KV{Key: "tokenizer.ggml.add_bos_token", Value: k.addBOS},
		gguf.KV{Key: "tokenizer.ggml.add_eos_token", Value: false},
	)
	if k.noSpacePrefix {
		kvs = append(kvs, gguf.KV{Key: "tokenizer.ggml.add_space_prefix", Value: false})
	}
	return kvs, nil
}
