// Package tokenizer turns text into token ids and back for GGUF models. It
// implements the two tokenizers of the llama family exactly as llama.cpp
// does (src/llama-vocab.cpp, src/unicode.cpp): SentencePiece
// (tokenizer.ggml.model = "llama") and GPT-2 byte-level BPE
// (tokenizer.ggml.model = "gpt2") with the pre-tokenizers named by
// tokenizer.ggml.pre. See docs/TOKENIZER.md.
//
// A Tokenizer is immutable once built and safe for concurrent use; a Decoder
// is not.
package tokenizer

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// Metadata is the part of a GGUF file's key/value store a tokenizer is built
// from; *gguf.File satisfies it.
type Metadata interface {
	String(key string) (string, bool)
	Uint(key string) (uint64, bool)
	Bool(key string) (bool, bool)
	Strings(key string) ([]string, bool)
	Float32s(key string) ([]float32, bool)
	Int32s(key string) ([]int32, bool)
}

// Model names as stored in tokenizer.ggml.model.
const (
	modelSPM = "llama"
	modelBPE = "gpt2"
)

// attr is a token's attribute set, the subset of llama.cpp's llama_token_attr
// bits this package acts on.
type attr uint16

const (
	attrUnknown attr = 1 << iota
	attrUnused
	attrNormal
	attrControl
	attrUserDefined
	attrByte
	attrRStrip // whitespace after the token's text is dropped when it is matched
)

// attrFromType maps a GGUF token_type (llama_token_type) to attributes.
// Unknown values become the empty set, as llama.cpp's UNDEFINED.
func attrFromType(t int32) attr {
	switch t {
	case 1:
		return attrNormal
	case 2:
		return attrUnknown
	case 3:
		return attrControl
	case 4:
		return attrUserDefined
	case 5:
		return attrUnused
	case 6:
		return attrByte
	}
	return 0
}

// Tokenizer encodes text to token ids and gives the text of each id.
type Tokenizer struct {
	model  string
	tokens []string
	scores []float32
	attrs  []attr
	ids    map[string]int32
	pieces []string // Piece(id), computed once

	// special lists the ids matched as whole tokens before the text is
	// tokenized: control, user-defined and unknown tokens, longest text first.
	special []int32

	bos, eos, unk  int32
	addBOS, addEOS bool
	eog            map[int32]bool

	// SentencePiece
	addSpacePrefix bool
	byteTokens     [256]int32 // byte fallback: <0xXX> (or the byte itself); -1 if neither exists

	// GPT-2 BPE
	pre          preTokenizer
	merges       map[mergePair]int32 // rank of each merge
	ignoreMerges bool                // a word that is itself a token is not merged (llama 3)
}

// mergePair is the (left, right) text of one BPE merge.
type mergePair struct{ left, right string }

// FromGGUF builds the tokenizer described by a GGUF file's tokenizer.* keys.
// It fails with a clear error when the vocabulary is missing or inconsistent
// or the model or pre-tokenizer is not supported.
func FromGGUF(md Metadata) (*Tokenizer, error) {
	model, ok := md.String("tokenizer.ggml.model")
	if !ok {
		return nil, fmt.Errorf("tokenizer: tokenizer.ggml.model is missing")
	}
	if model != modelSPM && model != modelBPE {
		return nil, fmt.Errorf("tokenizer: unsupported tokenizer model %q (supported: %q, %q)", model, modelSPM, modelBPE)
	}
	t := &Tokenizer{model: model}
	if err := t.loadVocab(md); err != nil {
		return nil, err
	}
	n := len(t.tokens)

	// Defaults per model as llama.cpp, before the metadata is consulted.
	t.bos, t.eos, t.unk = -1, -1, -1
	switch model {
	case modelSPM:
		t.bos, t.eos, t.unk = 1, 2, 0
		t.addBOS = true
		t.addSpacePrefix = true
		if v, ok := md.Bool("tokenizer.ggml.add_space_prefix"); ok {
			t.addSpacePrefix = v
		}
		t.buildByteTokens()
	case modelBPE:
		// llama.cpp's BPE default for both BOS and EOS is 11, kept so that
		// files without the ids behave as they do there.
		t.bos, t.eos = 11, 11
		pre, _ := md.String("tokenizer.ggml.pre")
		cfg, ok := preTokenizers[pre]
		if !ok {
			return nil, fmt.Errorf("tokenizer: unsupported pre-tokenizer %q (tokenizer.ggml.pre)", pre)
		}
		t.pre = cfg
		t.addBOS = cfg.addBOS
		t.ignoreMerges = cfg.ignoreMerges
		if err := t.loadMerges(md); err != nil {
			return nil, err
		}
	}
	for _, p := range []*int32{&t.bos, &t.eos, &t.unk} {
		if int(*p) >= n {
			*p = -1
		}
	}
	t.bos = specialID(md, "tokenizer.ggml.bos_token_id", t.bos, n)
	t.eos = specialID(md, "tokenizer.ggml.eos_token_id", t.eos, n)
	t.unk = specialID(md, "tokenizer.ggml.unknown_token_id", t.unk, n)

	if v, ok := md.Bool("tokenizer.ggml.add_bos_token"); ok {
		t.addBOS = v
	}
	if v, ok := md.Bool("tokenizer.ggml.add_eos_token"); ok {
		t.addEOS = v
	}
	if t.addBOS && t.bos < 0 {
		return nil, fmt.Errorf("tokenizer: BOS is to be added but tokenizer.ggml.bos_token_id is not set or out of range")
	}
	if t.addEOS && t.eos < 0 {
		return nil, fmt.Errorf("tokenizer: EOS is to be added but tokenizer.ggml.eos_token_id is not set or out of range")
	}

	t.markSpecial(md)
	t.buildSpecialList(md)
	t.buildPieces()
	return t, nil
}

// loadVocab reads tokens, scores and token types.
func (t *Tokenizer) loadVocab(md Metadata) error {
	tokens, ok := md.Strings("tokenizer.ggml.tokens")
	if !ok || len(tokens) == 0 {
		return fmt.Errorf("tokenizer: tokenizer.ggml.tokens is missing or empty")
	}
	tokens = slices.Clone(tokens) // empty texts are replaced below
	if len(tokens) > math.MaxInt32 {
		return fmt.Errorf("tokenizer: %d tokens do not fit int32 ids", len(tokens))
	}
	n := len(tokens)

	scores, ok := md.Float32s("tokenizer.ggml.scores")
	if !ok {
		// llama.cpp also accepts integer scores.
		if is, iok := md.Int32s("tokenizer.ggml.scores"); iok {
			scores, ok = make([]float32, len(is)), true
			for i, s := range is {
				scores[i] = float32(s)
			}
		}
	}
	if ok && len(scores) < n {
		return fmt.Errorf("tokenizer: tokenizer.ggml.scores has %d entries for %d tokens", len(scores), n)
	}
	if !ok {
		scores = make([]float32, n)
	}

	attrs := make([]attr, n)
	if types, ok := md.Int32s("tokenizer.ggml.token_type"); ok {
		if len(types) < n {
			return fmt.Errorf("tokenizer: tokenizer.ggml.token_type has %d entries for %d tokens", len(types), n)
		}
		for i := range attrs {
			attrs[i] = attrFromType(types[i])
		}
	} else {
		for i := range attrs {
			attrs[i] = attrNormal
		}
	}

	ids := make(map[string]int32, n)
	for i, s := range tokens {
		if s == "" {
			// llama.cpp keeps the id but gives it a text no input can produce.
			s = fmt.Sprintf("[EMPTY_%d]", i)
			tokens[i] = s
		}
		if j, dup := ids[s]; dup {
			return fmt.Errorf("tokenizer: duplicate token %q (ids %d and %d)", s, j, i)
		}
		ids[s] = int32(i)
	}
	t.tokens, t.scores, t.attrs, t.ids = tokens, scores[:n], attrs, ids
	return nil
}

// loadMerges reads the BPE merges. Each is "left right", split at the first
// space after the first byte (a left part may be a lone space); an entry
// without one maps ("", ""), which never matches. The first rank of a
// repeated pair wins.
func (t *Tokenizer) loadMerges(md Metadata) error {
	merges, ok := md.Strings("tokenizer.ggml.merges")
	if !ok {
		return fmt.Errorf("tokenizer: tokenizer.ggml.merges is missing (required by the %q model)", modelBPE)
	}
	if len(merges) > math.MaxInt32 {
		return fmt.Errorf("tokenizer: %d merges do not fit int32 ranks", len(merges))
	}
	t.merges = make(map[mergePair]int32, len(merges))
	for i, m := range merges {
		var p mergePair
		if len(m) > 1 {
			if k := strings.IndexByte(m[1:], ' '); k >= 0 {
				p = mergePair{m[:k+1], m[k+2:]}
			}
		}
		if _, seen := t.merges[p]; !seen {
			t.merges[p] = int32(i)
		}
	}
	return nil
}

// specialID returns the id stored under key when it is present and inside
// the vocabulary, else def (llama.cpp ignores out-of-range ids such as the
// 0xFFFFFFFF some converters write for "none").
func specialID(md Metadata, key string, def int32, n int) int32 {
	if v, ok := md.Uint(key); ok && v < uint64(n) {
		return int32(v)
	}
	return def
}

// buildByteTokens finds SentencePiece's byte-fallback tokens.
func (t *Tokenizer) buildByteTokens() {
	for b := range t.byteTokens {
		t.byteTokens[b] = -1
		if id, ok := t.ids[fmt.Sprintf("<0x%02X>", b)]; ok {
			t.byteTokens[b] = id
		} else if id, ok := t.ids[string([]byte{byte(b)})]; ok {
			t.byteTokens[b] = id
		}
	}
}

// buildPieces computes the text of every token once, as llama.cpp's
// token-to-piece cache (with special tokens rendered).
func (t *Tokenizer) buildPieces() {
	t.pieces = make([]string, len(t.tokens))
	for id, text := range t.tokens {
		a := t.attrs[id]
		switch {
		case a&(attrUnknown|attrControl|attrUserDefined) != 0:
			t.pieces[id] = text
		case a&attrNormal != 0:
			if t.model == modelSPM {
				t.pieces[id] = strings.ReplaceAll(text, spaceMarker, " ")
			} else {
				t.pieces[id] = byteDecode(text)
			}
		case a&attrByte != 0:
			if b, ok := parseByteToken(text); ok {
				t.pieces[id] = string([]byte{b})
			}
		}
		// Unused and undefined tokens have no text, as in llama.cpp.
	}
}

// parseByteToken reads the byte of a "<0xXX>" token.
func parseByteToken(s string) (byte, bool) {
	if len(s) != 6 || !strings.HasPrefix(s, "<0x") || s[5] != '>' {
		return 0, false
	}
	hi, ok1 := hexDigit(s[3])
	lo, ok2 := hexDigit(s[4])
	return hi<<4 | lo, ok1 && ok2
}

func hexDigit(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// Piece returns the raw bytes of token id as a string: "▁" becomes a space
// and <0xXX> the byte for SentencePiece, the byte-level alphabet is undone
// for BPE, and control, user-defined and unknown tokens give their text.
// A piece may be part of a UTF-8 sequence; use a Decoder to stream text. An
// id outside the vocabulary gives "".
func (t *Tokenizer) Piece(id int32) string {
	if id < 0 || int(id) >= len(t.pieces) {
		return ""
	}
	return t.pieces[id]
}

// VocabSize returns the number of tokens.
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }

// BOS returns the beginning-of-sequence id, or -1 if there is none.
func (t *Tokenizer) BOS() int32 { return t.bos }

// EOS returns the end-of-sequence id, or -1 if there is none.
func (t *Tokenizer) EOS() int32 { return t.eos }

// AddBOS reports whether Encode with addSpecial prepends BOS.
func (t *Tokenizer) AddBOS() bool { return t.addBOS }

// IsEOG reports whether id ends generation (EOS, EOT, EOM and the
// end-of-turn tokens llama.cpp recognises by their text).
func (t *Tokenizer) IsEOG(id int32) bool { return t.eog[id] }

// Model returns the tokenizer model: "llama" (SentencePiece) or "gpt2" (BPE).
func (t *Tokenizer) Model() string { return t.model }
