package synth

import (
	"fmt"
	"strings"
	"testing"
)

// build wants a vocabulary that t can check: n tokens, no duplicates.
func build(t *testing.T, k *tokenizerKind, n, nText int) (vocabulary, map[string]int) {
	t.Helper()
	v, err := k.build(n, nText)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.tokens) != n || len(v.types) != n || (k.model == modelSPM) != (len(v.scores) == n) {
		t.Fatalf("%d tokens, %d types, %d scores; want %d", len(v.tokens), len(v.types), len(v.scores), n)
	}
	index := map[string]int{}
	for i, tok := range v.tokens {
		if j, dup := index[tok]; dup {
			t.Fatalf("%q at %d and %d", tok, j, i)
		}
		index[tok] = i
	}
	return v, index
}

// The special tokens sit at the ids of the real vocabularies, written out
// from their tokenizer files, and the rest of the vocabulary is padding.
func TestVocabSpecials(t *testing.T) {
	for _, c := range []struct {
		name     string
		k        *tokenizerKind
		n, nText int
		want     map[int]string // id → text
		types    map[int]int32
	}{
		{"llama2", &spmLlama, 32000, 31997,
			map[int]string{0: "<unk>", 1: "<s>", 2: "</s>", 3: "<0x00>", 258: "<0xFF>", 259: "▁", 260: "▁a", 261: "a"},
			map[int]int32{0: tokUnknown, 1: tokControl, 2: tokControl, 3: tokByte, 259: tokNormal}},
		{"phi3", &spmPhi3, 32064, 31997,
			map[int]string{1: "<s>", 32000: "<|endoftext|>", 32001: "<|assistant|>", 32006: "<|system|>",
				32007: "<|end|>", 32010: "<|user|>", 32011: "[PAD32011]", 32063: "[PAD32063]"},
			map[int]int32{32000: tokControl, 32010: tokControl, 32011: tokUnused, 32063: tokUnused}},
		{"gemma3", &spmGemma3, 262144, 262037,
			map[int]string{0: "<pad>", 1: "<eos>", 2: "<bos>", 3: "<unk>", 4: "<mask>", 5: "[multimodal]", 6: "<unused0>",
				104: "<unused98>", 105: "<start_of_turn>", 106: "<end_of_turn>", 107: "<0x00>", 363: "▁"},
			map[int]int32{0: tokControl, 3: tokUnknown, 106: tokControl, 107: tokByte}},
		{"qwen", &bpeQwen, 151936, 151643,
			map[int]string{0: "Ā", 32: "Ġ", 33: "!", 97: "a", 256: "Ġa", 151643: "<|endoftext|>", 151644: "<|im_start|>",
				151645: "<|im_end|>", 151657: "<tool_call>", 151665: "<tool_response>", 151667: "<think>", 151668: "</think>",
				151669: "[PAD151669]", 151935: "[PAD151935]"},
			map[int]int32{97: tokNormal, 151643: tokControl, 151657: tokUserDefined, 151659: tokControl, 151668: tokUserDefined, 151935: tokUnused}},
		{"llama3", &bpeLlama3, 128256, 128000,
			map[int]string{128000: "<|begin_of_text|>", 128001: "<|end_of_text|>", 128006: "<|start_header_id|>",
				128008: "<|eom_id|>", 128009: "<|eot_id|>", 128010: "<|python_tag|>", 128011: "<|reserved_special_token_3|>",
				128255: "<|reserved_special_token_247|>"},
			map[int]int32{128000: tokControl, 128255: tokControl}},
	} {
		t.Run(c.name, func(t *testing.T) {
			v, _ := build(t, c.k, c.n, c.nText)
			for id, text := range c.want {
				if v.tokens[id] != text {
					t.Errorf("token %d is %q, want %q", id, v.tokens[id], text)
				}
			}
			for id, typ := range c.types {
				if v.types[id] != typ {
					t.Errorf("token %d (%q) has type %d, want %d", id, v.tokens[id], v.types[id], typ)
				}
			}
		})
	}
}

// SentencePiece pieces: byte tokens after the head, and every piece can be
// built by merging two shorter ones whose prefix scores higher (merges
// earlier).
func TestVocabSPM(t *testing.T) {
	for _, c := range []struct {
		k        *tokenizerKind
		n, nText int
	}{{&spmLlama, 260, 257}, {&spmLlama, 1024, 1021}, {&spmLlama, 128256, 128253}, {&spmGemma3, 1024, 917}, {&spmPhi3, 1024, 1000}} {
		v, index := build(t, c.k, c.n, c.nText)
		first := len(c.k.head)
		for b := range 256 {
			tok := fmt.Sprintf("<0x%02X>", b)
			if i := index[tok]; i != first+b || v.types[i] != tokByte || v.scores[i] != 0 {
				t.Errorf("byte token %s at %d type %d score %g", tok, i, v.types[i], v.scores[i])
			}
		}
		for i := first + 256; i < first+c.nText; i++ {
			if v.types[i] != tokNormal {
				t.Errorf("token %d type %d", i, v.types[i])
			}
			r := []rune(v.tokens[i])
			if len(r) == 1 {
				continue
			}
			prefix := string(r[:len(r)-1])
			j, ok := index[prefix]
			if !ok || v.scores[j] <= v.scores[i] {
				t.Errorf("piece %q: prefix %q missing or scores lower", v.tokens[i], prefix)
			}
		}
	}
}

// Byte-level BPE: the 256 byte characters come first, and each merged
// token has one merge, in token order, of two earlier tokens.
func TestVocabBPE(t *testing.T) {
	for _, c := range []struct {
		k        *tokenizerKind
		n, nText int
	}{{&bpeQwen, 1024, 990}, {&bpeLlama3, 1024, 768}, {&bpeQwen, 151936, 151643}} {
		v, index := build(t, c.k, c.n, c.nText)
		if len(v.merges) != c.nText-256 {
			t.Fatalf("%d merges for %d generated tokens", len(v.merges), c.nText)
		}
		seen := map[rune]bool{}
		for b := range 256 {
			r := []rune(v.tokens[b])
			if len(r) != 1 || seen[r[0]] || r[0] < 0x21 || r[0] > 0x143 {
				t.Fatalf("byte %d is %q", b, v.tokens[b])
			}
			seen[r[0]] = true
		}
		if v.tokens[' '] != "Ġ" || v.tokens['\n'] != "Ċ" || v.tokens['A'] != "A" {
			t.Errorf("bytes ' ', '\\n', 'A' are %q %q %q, want GPT-2's Ġ Ċ A", v.tokens[' '], v.tokens['\n'], v.tokens['A'])
		}
		for i, m := range v.merges {
			id := 256 + i
			l, r, ok := strings.Cut(m, " ")
			if !ok || l+r != v.tokens[id] || index[l] >= id || index[r] >= id || l == "" || r == "" {
				t.Fatalf("merge %d %q for token %d %q", i, m, id, v.tokens[id])
			}
		}
	}
}

func TestVocabErrors(t *testing.T) {
	for _, c := range []struct {
		k        *tokenizerKind
		n, nText int
		want     string
	}{
		{&spmLlama, 200, 197, "at least 257"},
		{&bpeLlama3, 1000, 768, "do not fit"},
	} {
		if _, err := c.k.build(c.n, c.nText); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("build(%d, %d): %v, want an error mentioning %q", c.n, c.nText, err, c.want)
		}
	}
}
