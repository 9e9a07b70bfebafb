package tokenizer

import (
	"slices"
	"strings"
)

// fimRoles are the fill-in-the-middle tokens. llama.cpp reads their ids from
// the metadata or, failing that, recognises them by text and makes them
// control tokens (so plain text never turns into them); pad, repo and file
// separator also end generation.
var fimRoles = []struct {
	keys  []string // a later key overrides an earlier one
	texts []string
	eog   bool
}{
	{[]string{"tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.prefix_token_id"},
		[]string{"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>", "<|code_prefix|>", "<|prefix|>"}, false},
	{[]string{"tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.suffix_token_id"},
		[]string{"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>", "<|code_suffix|>", "<|suffix|>"}, false},
	{[]string{"tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.middle_token_id"},
		[]string{"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>", "<|code_middle|>", "<|middle|>"}, false},
	{[]string{"tokenizer.ggml.fim_pad_token_id"},
		[]string{"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"}, true},
	{[]string{"tokenizer.ggml.fim_rep_token_id"},
		[]string{"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"}, true},
	{[]string{"tokenizer.ggml.fim_sep_token_id"},
		[]string{"<|file_sep|>"}, true},
}

// eogTexts are the token texts llama.cpp treats as end of generation (and
// as control tokens) whatever the metadata says.
var eogTexts = []string{
	"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
	"<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
	"<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
	"<｜end▁of▁sentence｜>", "[e~[",
}

// markSpecial fixes up token attributes the way llama.cpp does after
// loading, and collects the end-of-generation set.
func (t *Tokenizer) markSpecial(md Metadata) {
	n := len(t.tokens)
	t.eog = map[int32]bool{}
	for _, r := range fimRoles {
		id := int32(-1)
		for _, k := range r.keys {
			id = specialID(md, k, id, n)
		}
		if id < 0 {
			// llama.cpp takes whichever candidate its hash map yields first;
			// the lowest id is the deterministic choice.
			id = t.lowestID(r.texts)
			if id >= 0 {
				t.attrs[id] |= attrControl
			}
		}
		if id >= 0 && r.eog {
			t.eog[id] = true
		}
	}
	for _, s := range eogTexts {
		if id, ok := t.ids[s]; ok {
			t.eog[id] = true
			t.attrs[id] |= attrControl
		}
	}
	// gpt-oss's channel markers are always rendered and matched as text.
	for _, s := range []string{"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"} {
		if id, ok := t.ids[s]; ok {
			t.attrs[id] = attrUserDefined
		}
	}
	for _, id := range []int32{
		t.eos,
		specialID(md, "tokenizer.ggml.eot_token_id", -1, n),
		specialID(md, "tokenizer.ggml.eom_token_id", -1, n),
	} {
		if id >= 0 {
			t.eog[id] = true
		}
	}
	// In the o200k-harmony and solar-open vocabularies <|end|> separates
	// messages inside one turn, so it must not stop generation.
	has := func(s string) bool { id, ok := t.ids[s]; return ok && t.eog[id] }
	if end, ok := t.ids["<|end|>"]; ok && t.eog[end] {
		call := has("<|call|>") || has("<|calls|>")
		if call && (has("<|return|>") || has("<|flush|>")) {
			delete(t.eog, end)
			t.attrs[end] = attrUserDefined
		}
	}
	// Gemma 4 and PaddleOCR use </s> as ordinary text.
	if s, ok := t.ids["</s>"]; ok && has("<|tool_response>") {
		delete(t.eog, s)
		t.attrs[s] = attrNormal
	}
}

// lowestID returns the smallest id whose text is one of texts, or -1.
func (t *Tokenizer) lowestID(texts []string) int32 {
	best := int32(-1)
	for _, s := range texts {
		if id, ok := t.ids[s]; ok && (best < 0 || id < best) {
			best = id
		}
	}
	return best
}

// buildSpecialList collects the tokens matched whole in the input, longest
// first so that a token containing another wins (llama.cpp's order among
// equal lengths is unspecified; ids break ties here), and applies llama.cpp's
// per-model whitespace stripping.
func (t *Tokenizer) buildSpecialList(md Metadata) {
	for id, a := range t.attrs {
		if a&(attrControl|attrUserDefined|attrUnknown) != 0 {
			t.special = append(t.special, int32(id))
		}
	}
	slices.SortStableFunc(t.special, func(a, b int32) int {
		return len(t.tokens[b]) - len(t.tokens[a])
	})

	// Phi-3's chat tokens swallow the whitespace that follows them.
	name, _ := md.String("general.name")
	name = strings.Map(asciiLower, name)
	if strings.Contains(name, "phi-3") || strings.Contains(name, "phi3") {
		for _, id := range t.special {
			t.attrs[id] |= attrRStrip
		}
		if id, ok := t.ids["</s>"]; ok {
			t.attrs[id] |= attrRStrip
		}
		for _, s := range []string{"<unk>", "<s>", "<|endoftext|>"} {
			if id, ok := t.ids[s]; ok {
				t.attrs[id] &^= attrRStrip
			}
		}
	}
}

// asciiLower lowercases ASCII letters only, as C's tolower in the "C" locale.
func asciiLower(r rune) rune {
	if 'A' <= r && r <= 'Z' {
		return r + 'a' - 'A'
	}
	return r
}

// isCSpace is C's isspace in the "C" locale, which llama.cpp uses to strip
// whitespace next to special tokens.
func isCSpace(c byte) bool {
	return c == ' ' || ('\t' <= c && c <= '\r')
}

// fragment is a piece of the input: a special token (id >= 0) or the text
// text[start:end] still to be tokenized (id < 0).
type fragment struct {
	id         int32
	start, end int
}

// partition splits text at every occurrence of a special token. Control and
// unknown tokens are matched only when parseSpecial is set; user-defined
// tokens always are (as Hugging Face tokenizers and llama.cpp do).
func (t *Tokenizer) partition(text string, parseSpecial bool) []fragment {
	if text == "" {
		return nil
	}
	frags := []fragment{{id: -1, start: 0, end: len(text)}}
	var next []fragment
	for _, id := range t.special {
		a := t.attrs[id]
		if !parseSpecial && a&(attrControl|attrUnknown) != 0 {
			continue
		}
		tok := t.tokens[id]
		next = next[:0]
		for _, f := range frags {
			if f.id >= 0 {
				next = append(next, f)
				continue
			}
			start, end := f.start, f.end
			for {
				k := strings.Index(text[start:end], tok)
				if k < 0 {
					break
				}
				if k > 0 {
					next = append(next, fragment{id: -1, start: start, end: start + k})
				}
				next = append(next, fragment{id: id})
				start += k + len(tok)
				if a&attrRStrip != 0 {
					for start < end && isCSpace(text[start]) {
						start++
					}
				}
			}
			if start < end {
				next = append(next, fragment{id: -1, start: start, end: end})
			}
		}
		frags, next = next, frags
	}
	return frags
}
