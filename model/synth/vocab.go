package synth

import (
	"fmt"

	"github.com/vkinfer/vkinfer/model/tokenizer"
)

// llama.cpp token types (llama_token_type).
const (
	tokNormal      int32 = 1
	tokUnknown     int32 = 2
	tokControl     int32 = 3
	tokUserDefined int32 = 4
	tokUnused      int32 = 5
	tokByte        int32 = 6
)

// special is a token with a fixed text and type: a family's control
// tokens, placed where its real vocabulary has them.
type special struct {
	text string
	typ  int32
}

// tokenizerKind is the tokenizer layout of a model family: the tokenizer
// model, the special tokens at the start and at the end of the vocabulary,
// which of them the *_token_id keys name, and the flags. The tokens between
// head and tail are generated (see build), and any left over up to the
// vocabulary size are padding, as convert_hf_to_gguf writes ("[PAD<id>]",
// unused).
type tokenizerKind struct {
	model              string    // tokenizer.ggml.model: "llama" (SentencePiece) or "gpt2" (byte-level BPE)
	pre                string    // tokenizer.ggml.pre, for "gpt2"
	head               []special // ids 0, 1, …
	tail               []special // right after the generated tokens
	bos, eos, unk, pad string    // texts of the tokens the *_token_id keys name ("": no key)
	addBOS             bool
	noSpacePrefix      bool // tokenizer.ggml.add_space_prefix = false: no "▁" before the text (Gemma)
}

const (
	modelSPM = "llama"
	modelBPE = "gpt2"
)

// spmLlama is Llama-2's SentencePiece layout: <unk>, <s>, </s>, the 256
// byte-fallback tokens, then pieces.
var spmLlama = tokenizerKind{
	model: modelSPM,
	head:  []special{{"<unk>", tokUnknown}, {"<s>", tokControl}, {"</s>", tokControl}},
	bos:   "<s>", eos: "</s>", unk: "<unk>", addBOS: true,
}

// spmPhi3 is Phi-3's: Llama-2's 32000 tokens, then its chat tokens (the
// end of text is the EOS and the padding), then padding up to 32064.
var spmPhi3 = func() tokenizerKind {
	k := spmLlama
	k.tail = controls("<|endoftext|>", "<|assistant|>", "<|placeholder1|>", "<|placeholder2|>", "<|placeholder3|>",
		"<|placeholder4|>", "<|system|>", "<|end|>", "<|placeholder5|>", "<|placeholder6|>", "<|user|>")
	k.eos, k.pad = "<|endoftext|>", "<|endoftext|>"
	return k
}()

// spmGemma3 is Gemma 3's SentencePiece layout: <pad> <eos> <bos> <unk>
// <mask> [multimodal] <unused0>…<unused98> <start_of_turn> <end_of_turn> at
// ids 0–106, as in the real vocabulary, then the byte tokens and pieces.
// Gemma's tokenizer adds no "▁" before the text.
var spmGemma3 = func() tokenizerKind {
	head := []special{{"<pad>", tokControl}, {"<eos>", tokControl}, {"<bos>", tokControl}, {"<unk>", tokUnknown},
		{"<mask>", tokUserDefined}, {"[multimodal]", tokUserDefined}}
	for i := range 99 {
		head = append(head, special{fmt.Sprintf("<unused%d>", i), tokUserDefined})
	}
	head = append(head, controls("<start_of_turn>", "<end_of_turn>")...)
	return tokenizerKind{model: modelSPM, head: head, bos: "<bos>", eos: "<eos>", unk: "<unk>", pad: "<pad>",
		addBOS: true, noSpacePrefix: true}
}()

// bpeQwen is Qwen2/Qwen3's byte-level BPE: 151643 ordinary tokens (the
// bytes and merges), then the 26 added tokens (<|endoftext|> is BOS and
// padding, <|im_end|> the EOS of the chat models; the tool and think tags
// are not special), then padding up to 151936. No BOS is added.
var bpeQwen = tokenizerKind{
	model: modelBPE, pre: "qwen2",
	tail: append(controls("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
		"<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
		"<|vision_pad|>", "<|image_pad|>", "<|video_pad|>"),
		special{"<tool_call>", tokUserDefined}, special{"</tool_call>", tokUserDefined},
		special{"<|fim_prefix|>", tokControl}, special{"<|fim_middle|>", tokControl}, special{"<|fim_suffix|>", tokControl},
		special{"<|fim_pad|>", tokControl}, special{"<|repo_name|>", tokControl}, special{"<|file_sep|>", tokControl},
		special{"<tool_response>", tokUserDefined}, special{"</tool_response>", tokUserDefined},
		special{"<think>", tokUserDefined}, special{"</think>", tokUserDefined}),
	bos: "<|endoftext|>", eos: "<|im_end|>", pad: "<|endoftext|>",
}

// bpeLlama3 is Llama 3's byte-level BPE: 128000 ordinary tokens, then 256
// control tokens (<|eot_id|> is the EOS of the instruct models).
var bpeLlama3 = func() tokenizerKind {
	tail := controls("<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
		"<|finetune_right_pad_id|>", "<|reserved_special_token_2|>", "<|start_header_id|>", "<|end_header_id|>",
		"<|eom_id|>", "<|eot_id|>", "<|python_tag|>")
	for i := 3; len(tail) < 256; i++ {
		tail = append(tail, special{fmt.Sprintf("<|reserved_special_token_%d|>", i), tokControl})
	}
	return tokenizerKind{model: modelBPE, pre: "llama-bpe", tail: tail, bos: "<|begin_of_text|>", eos: "<|eot_id|>", addBOS: true}
}()

func controls(texts ...string) []special {
	s := make([]special, len(texts))
	for i, t := range texts {
		s[i] = special{t, tokControl}
	}
	return s
}

// vocabulary is a tokenizer's tables as GGUF stores them.
type vocabulary struct {
	tokens []string
	scores []float32 // SentencePiece only
	types  []int32
	merges []string // BPE only
}

// build lays out a vocabulary of n tokens: k's head, nText generated
// tokens, k's tail, then padding. It fails when nText is too small for the
// byte tokens or the specials do not fit.
func (k *tokenizerKind) build(n, nText int) (vocabulary, error) {
	if min := 257; nText < min {
		return vocabulary{}, fmt.Errorf("vocabulary of %d tokens: %d generated tokens, want at least %d", n, nText, min)
	}
	if pad := n - len(k.head) - nText - len(k.tail); pad < 0 {
		return vocabulary{}, fmt.Errorf("vocabulary of %d tokens: %d specials and %d generated tokens do not fit", n, len(k.head)+len(k.tail), nText)
	}
	var v vocabulary
	for _, s := range k.head {
		v.tokens, v.types = append(v.tokens, s.text), append(v.types, s.typ)
	}
	if k.model == modelSPM {
		v.spmPieces(nText)
	} else {
		v.bpePieces(nText)
	}
	for _, s := range k.tail {
		v.tokens, v.types = append(v.tokens, s.text), append(v.types, s.typ)
	}
	for i := len(v.tokens); i < n; i++ {
		v.tokens, v.types = append(v.tokens, fmt.Sprintf("[PAD%d]", i)), append(v.types, tokUnused)
	}
	if k.model == modelSPM {
		// Specials and byte tokens score 0; spmPieces scored its pieces.
		v.scores = append(v.scores, make([]float32, n-len(v.scores))...)
	}
	return v, nil
}

// spmPieces appends n SentencePiece tokens laid out like Llama-2's: the 256
// byte-fallback tokens, then pieces. The pieces are "▁" followed by the
// lowercase strings in order of length ("▁a", "a", "▁b", … "▁aa", "aa", …),
// each with and without the word-start mark. Every piece's prefixes come
// before it, so the merges can reach it, and scores fall with the index so
// shorter pieces merge first. n must be at least 257.
func (v *vocabulary) spmPieces(n int) {
	end := len(v.tokens) + n
	for b := range 256 {
		v.tokens, v.types = append(v.tokens, fmt.Sprintf("<0x%02X>", b)), append(v.types, tokByte)
	}
	first := len(v.tokens)
	v.tokens, v.types = append(v.tokens, "▁"), append(v.types, tokNormal)
	// word is a base-26 odometer over 'a'..'z' that grows by one letter
	// each time it wraps, enumerating all strings by length.
	word := []byte{'a'}
	for len(v.tokens) < end {
		v.tokens, v.types = append(v.tokens, "▁"+string(word)), append(v.types, tokNormal)
		if len(v.tokens) < end {
			v.tokens, v.types = append(v.tokens, string(word)), append(v.types, tokNormal)
		}
		word = nextWord(word)
	}
	// Everything before the pieces (specials, bytes) scores 0.
	v.scores = make([]float32, end)
	for i := first; i < end; i++ {
		v.scores[i] = -float32(i - first)
	}
}

// bpePieces appends n byte-level BPE tokens: the 256 bytes in GPT-2's
// printable alphabet (byte order), then merged tokens "Ġ"+w for every
// lowercase string w in order of length and, for w of two letters or more,
// w itself, each with the merge that makes it (its text less the last
// letter, and that letter). Both halves of every merge come before it, so
// the merges, ranked in order, reach every token. n must be at least 256.
func (v *vocabulary) bpePieces(n int) {
	end := len(v.tokens) + n
	for b := range 256 {
		v.tokens, v.types = append(v.tokens, tokenizer.ByteToken(byte(b))), append(v.types, tokNormal)
	}
	space := tokenizer.ByteToken(' ')
	add := func(left, right string) {
		v.tokens, v.types = append(v.tokens, left+right), append(v.types, tokNormal)
		v.merges = append(v.merges, left+" "+right)
	}
	word := []byte{'a'}
	for len(v.tokens) < end {
		last := string(word[len(word)-1])
		add(space+string(word[:len(word)-1]), last)
		if len(word) > 1 && len(v.tokens) < end {
			add(string(word[:len(word)-1]), last)
		}
		word = nextWord(word)
	}
}

// id is the id of a head or tail token of k in a vocabulary of nText
// generated tokens, or -1.
func (k *tokenizerKind) id(text string, nText int) int {
	for i, s := range k.head {
		if s.text == text {
			return i
		}
	}
	for i, s := range k.tail {
		if s.text == text {
			return len(k.head) + nText + i
		}
	}
	return -1
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
