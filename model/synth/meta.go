package synth

import (
	"fmt"

	"github.com/vkinfer/vkinfer/gguf"
)

// Special token ids, as in Llama-2's SentencePiece vocabulary.
const (
	unkID = 0
	bosID = 1
	eosID = 2
)

// llama.cpp token types (llama_token_type).
const (
	tokNormal  int32 = 1
	tokUnknown int32 = 2
	tokControl int32 = 3
	tokByte    int32 = 6
)

// quantizationVersion is GGML_QNT_VERSION; convert_hf_to_gguf and
// llama-quantize both record it.
const quantizationVersion = 2

// metadata returns the key/values of a file of preset p in mix f: what
// llama.cpp needs to load it, and a SentencePiece vocabulary.
func (p *preset) metadata(f *ftype) []gguf.KV {
	a := p.arch + "."
	kvs := []gguf.KV{
		{Key: "general.architecture", Value: p.arch},
		{Key: "general.name", Value: fmt.Sprintf("vkinfer synthetic %s %s", p.name, f.name)},
		{Key: "general.file_type", Value: f.fileType},
		{Key: "general.quantization_version", Value: uint32(quantizationVersion)},
		{Key: a + "vocab_size", Value: uint32(p.nVocab)},
		{Key: a + "context_length", Value: p.ctx},
		{Key: a + "embedding_length", Value: uint32(p.nEmbd)},
		{Key: a + "block_count", Value: uint32(p.nLayer)},
		{Key: a + "feed_forward_length", Value: uint32(p.nFF)},
		{Key: a + "attention.head_count", Value: uint32(p.nHead)},
		{Key: a + "attention.head_count_kv", Value: uint32(p.nKV)},
		{Key: a + "attention.layer_norm_rms_epsilon", Value: p.eps},
		{Key: a + "rope.dimension_count", Value: uint32(p.headDim)},
		{Key: a + "rope.freq_base", Value: p.ropeBase},
	}
	tokens, scores, types := vocab(p.nVocab)
	return append(kvs,
		gguf.KV{Key: "tokenizer.ggml.model", Value: "llama"},
		gguf.KV{Key: "tokenizer.ggml.tokens", Value: tokens},
		gguf.KV{Key: "tokenizer.ggml.scores", Value: scores},
		gguf.KV{Key: "tokenizer.ggml.token_type", Value: types},
		gguf.KV{Key: "tokenizer.ggml.bos_token_id", Value: uint32(bosID)},
		gguf.KV{Key: "tokenizer.ggml.eos_token_id", Value: uint32(eosID)},
		gguf.KV{Key: "tokenizer.ggml.unknown_token_id", Value: uint32(unkID)},
		gguf.KV{Key: "tokenizer.ggml.add_bos_token", Value: true},
		gguf.KV{Key: "tokenizer.ggml.add_eos_token", Value: false},
	)
}

// vocab builds a SentencePiece vocabulary of n tokens laid out like
// Llama-2's: <unk>, <s>, </s>, the 256 byte-fallback tokens, then pieces.
// The pieces are "▁" followed by the lowercase strings in order of length
// ("▁a", "a", "▁b", … "▁aa", "aa", …), each with and without the word-start
// mark. Every piece's prefixes come before it, so the BPE merges can reach
// it, and scores fall with the index so shorter pieces merge first.
// n must be at least 260 (every preset's is far larger).
func vocab(n int) (tokens []string, scores []float32, types []int32) {
	tokens = make([]string, 0, n)
	types = make([]int32, 0, n)
	tokens = append(tokens, "<unk>", "<s>", "</s>")
	types = append(types, tokUnknown, tokControl, tokControl)
	for b := range 256 {
		tokens = append(tokens, fmt.Sprintf("<0x%02X>", b))
		types = append(types, tokByte)
	}
	tokens = append(tokens, "▁")
	types = append(types, tokNormal)
	firstPiece := len(tokens) - 1
	// word is a base-26 odometer over 'a'..'z' that grows by one letter
	// each time it wraps, enumerating all strings by length.
	word := []byte{'a'}
	for len(tokens) < n {
		tokens = append(tokens, "▁"+string(word))
		types = append(types, tokNormal)
		if len(tokens) < n {
			tokens = append(tokens, string(word))
			types = append(types, tokNormal)
		}
		word = nextWord(word)
	}
	scores = make([]float32, n)
	for i := firstPiece; i < n; i++ {
		scores[i] = -float32(i - firstPiece)
	}
	return tokens, scores, types
}

// nextWord returns the lowercase string after w in length-then-alphabetical
// order ("z" → "aa", "az" → "ba", "zz" → "aaa").
func nextWord(w []byte) []byte {
	for i := len(w) - 1; i >= 0; i-- {
		if w[i] < 'z' {
			w[i]++
			return w
		}
		w[i] = 'a'
	}
	return append([]byte{'a'}, w...)
}
