package tokenizer

import (
	"slices"
	"strings"
	"testing"
)

func TestStories260K(t *testing.T) {
	tok := load(t, "stories260K.gguf")
	if tok.Model() != "llama" || tok.VocabSize() != 512 {
		t.Fatalf("model %q with %d tokens, want llama with 512", tok.Model(), tok.VocabSize())
	}
	got := tok.Encode("Once upon a time", true, false)
	if want := []int32{1, 403, 407, 261, 378}; !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// TestSpecialIDs checks ids and flags against the metadata of each
// vocabulary and llama.cpp's defaults (llama-bpe has no add_bos_token: its
// pre-tokenizer implies BOS).
func TestSpecialIDs(t *testing.T) {
	tests := []struct {
		vocab    string
		model    string
		n        int
		bos, eos int32
		addBOS   bool
		eog      []int32
		notEOG   []int32
	}{
		{"llama-spm", "llama", 32000, 1, 2, true, []int32{2}, []int32{0, 1, 13}},
		{"phi-3", "llama", 32064, 1, 32000, true, []int32{2, 32000, 32007}, []int32{1, 32001, 32010}},
		{"llama-bpe", "gpt2", 128256, 128000, 128001, true, []int32{128001, 128009}, []int32{128000, 128006, 128007}},
		{"qwen2", "gpt2", 151936, 151643, 151643, false, []int32{151643, 151645}, []int32{151644, 151646}},
		{"gpt-2", "gpt2", 50257, 50256, 50256, false, []int32{50256}, []int32{0, 198}},
	}
	for _, tc := range tests {
		tok := load(t, "tokenizer", "ggml-vocab-"+tc.vocab+".gguf")
		if tok.Model() != tc.model || tok.VocabSize() != tc.n || tok.BOS() != tc.bos || tok.EOS() != tc.eos || tok.AddBOS() != tc.addBOS {
			t.Errorf("%s: model %q n %d bos %d eos %d addBOS %v; want %q %d %d %d %v", tc.vocab,
				tok.Model(), tok.VocabSize(), tok.BOS(), tok.EOS(), tok.AddBOS(), tc.model, tc.n, tc.bos, tc.eos, tc.addBOS)
		}
		for _, id := range tc.eog {
			if !tok.IsEOG(id) {
				t.Errorf("%s: %d (%q) should end generation", tc.vocab, id, tok.Piece(id))
			}
		}
		for _, id := range tc.notEOG {
			if tok.IsEOG(id) {
				t.Errorf("%s: %d (%q) should not end generation", tc.vocab, id, tok.Piece(id))
			}
		}
		if tok.IsEOG(-1) || tok.IsEOG(int32(tc.n)) {
			t.Errorf("%s: ids outside the vocabulary end generation", tc.vocab)
		}
	}
}

func TestAddSpecial(t *testing.T) {
	spm := load(t, "tokenizer", "ggml-vocab-llama-spm.gguf")
	if got, want := spm.Encode("Hello world", true, false), []int32{1, 15043, 3186}; !slices.Equal(got, want) {
		t.Errorf("spm: got %v, want %v", got, want)
	}
	if got := spm.Encode("", true, false); !slices.Equal(got, []int32{1}) {
		t.Errorf("spm empty: got %v, want [1]", got)
	}
	if got := spm.Encode("", false, false); len(got) != 0 {
		t.Errorf("spm empty without BOS: got %v", got)
	}
	bpe := load(t, "tokenizer", "ggml-vocab-llama-bpe.gguf")
	if got, want := bpe.Encode("Hello world", true, false), []int32{128000, 9906, 1917}; !slices.Equal(got, want) {
		t.Errorf("llama-bpe: got %v, want %v", got, want)
	}
	qwen := load(t, "tokenizer", "ggml-vocab-qwen2.gguf")
	if got, want := qwen.Encode("Hello world", true, false), qwen.Encode("Hello world", false, false); !slices.Equal(got, want) {
		t.Errorf("qwen2 adds special tokens it should not: %v vs %v", got, want)
	}
	// add_eos_token from the metadata.
	f := fixturesMeta(t, "ggml-vocab-llama-spm.gguf")
	eos, err := FromGGUF(meta{base: f, vals: map[string]any{"tokenizer.ggml.add_eos_token": true, "tokenizer.ggml.add_bos_token": false}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := eos.Encode("Hello world", true, false), []int32{15043, 3186, 2}; !slices.Equal(got, want) {
		t.Errorf("add_eos: got %v, want %v", got, want)
	}
}

func TestParseSpecial(t *testing.T) {
	bpe := load(t, "tokenizer", "ggml-vocab-llama-bpe.gguf")
	hi := bpe.Encode("hi", false, false)
	text := "<|start_header_id|>user<|end_header_id|>hi<|eot_id|>"
	got := bpe.Encode(text, false, true)
	want := slices.Concat([]int32{128006}, bpe.Encode("user", false, false), []int32{128007}, hi, []int32{128009})
	if !slices.Equal(got, want) {
		t.Errorf("parsed: got %v, want %v", got, want)
	}
	// Without parsing, control texts are ordinary text.
	plain := bpe.Encode(text, false, false)
	for _, id := range plain {
		if id >= 128000 {
			t.Fatalf("control token %d produced from plain text: %v", id, plain)
		}
	}
	if got := concatPieces(bpe, plain); got != text {
		t.Errorf("plain text round trip: %q", got)
	}

	// User-defined tokens are matched even without parseSpecial.
	qwen := load(t, "tokenizer", "ggml-vocab-qwen2.gguf")
	got = qwen.Encode("a[PAD151646]b", false, false)
	want = slices.Concat(qwen.Encode("a", false, false), []int32{151646}, qwen.Encode("b", false, false))
	if !slices.Equal(got, want) {
		t.Errorf("user-defined: got %v, want %v", got, want)
	}

	// SentencePiece restarts the space prefix after a special token, and
	// Phi-3's special tokens swallow the whitespace after them.
	phi := load(t, "tokenizer", "ggml-vocab-phi-3.gguf")
	got = phi.Encode("<|user|>  hi<|end|>\nok", true, true)
	want = slices.Concat([]int32{1, 32010}, phi.Encode("hi", false, false), []int32{32007}, phi.Encode("ok", false, false))
	if !slices.Equal(got, want) {
		t.Errorf("phi-3: got %v, want %v", got, want)
	}
	// <s> does not strip: the space prefix is added to "  x" as is.
	got = phi.Encode("<s>  x", false, true)
	want = slices.Concat([]int32{1}, phi.Encode("  x", false, false))
	if !slices.Equal(got, want) {
		t.Errorf("phi-3 <s>: got %v, want %v", got, want)
	}
}

func concatPieces(t *Tokenizer, ids []int32) string {
	var b strings.Builder
	for _, id := range ids {
		b.WriteString(t.Piece(id))
	}
	return b.String()
}

func TestPiece(t *testing.T) {
	spm := load(t, "tokenizer", "ggml-vocab-llama-spm.gguf")
	bpe := load(t, "tokenizer", "ggml-vocab-llama-bpe.gguf")
	tests := []struct {
		tok  *Tokenizer
		id   int32
		want string
	}{
		{spm, 15043, " Hello"},
		{spm, 13, "\n"},         // <0x0A>
		{spm, 3 + 0xE2, "\xe2"}, // <0xE2>: a lone byte
		{spm, 1, "<s>"},
		{spm, 0, "<unk>"},
		{spm, -1, ""},
		{spm, 32000, ""},
		{bpe, 1917, " world"}, // "Ġworld"
		{bpe, 198, "\n"},      // "Ċ"
		{bpe, 128000, "<|begin_of_text|>"},
		{bpe, 128256, ""},
	}
	for _, tc := range tests {
		if got := tc.tok.Piece(tc.id); got != tc.want {
			t.Errorf("%s Piece(%d) = %q, want %q", tc.tok.Model(), tc.id, got, tc.want)
		}
	}
}

// vocab builds a hand-made vocabulary: tokens with scores (nil: none) and
// types.
func vocab(model string, tokens []string, scores []float32, types []int32, extra map[string]any) meta {
	vals := map[string]any{
		"tokenizer.ggml.model":      model,
		"tokenizer.ggml.tokens":     tokens,
		"tokenizer.ggml.token_type": types,
	}
	if scores != nil {
		vals["tokenizer.ggml.scores"] = scores
	}
	for k, v := range extra {
		vals[k] = v
	}
	return meta{vals: vals}
}

// TestSPMMergeOrder checks the SentencePiece merge order on a tiny
// vocabulary: the best-scoring pair first, the leftmost among equals, and
// bytes without a byte token falling back to <unk>.
func TestSPMMergeOrder(t *testing.T) {
	tokens := []string{"<unk>", "<s>", "</s>", "a", "b", "c", "ab", "bc"}
	types := []int32{2, 3, 3, 1, 1, 1, 1, 1}
	noPrefix := map[string]any{"tokenizer.ggml.add_space_prefix": false}
	tests := []struct {
		ab, bc float32
		in     string
		want   []int32
	}{
		{-2, -1, "abc", []int32{3, 7}},     // bc scores higher
		{-1, -2, "abc", []int32{6, 5}},     // ab scores higher
		{-1, -1, "abc", []int32{6, 5}},     // a tie goes to the left pair
		{-1, -1, "abzc", []int32{6, 0, 5}}, // z has no token and no byte token
	}
	for _, tc := range tests {
		tok, err := FromGGUF(vocab("llama", tokens, []float32{0, 0, 0, 0, 0, 0, tc.ab, tc.bc}, types, noPrefix))
		if err != nil {
			t.Fatal(err)
		}
		if got := tok.Encode(tc.in, false, false); !slices.Equal(got, tc.want) {
			t.Errorf("ab=%v bc=%v %q: got %v, want %v", tc.ab, tc.bc, tc.in, got, tc.want)
		}
	}
}

// TestBPEMergeOrder checks that merges apply in rank order, whatever the
// position, on a tiny byte-level vocabulary.
func TestBPEMergeOrder(t *testing.T) {
	tokens := []string{"a", "b", "c", "ab", "bc", "abc"}
	types := []int32{1, 1, 1, 1, 1, 1}
	tests := []struct {
		merges []string
		want   []int32
	}{
		{[]string{"b c", "a bc"}, []int32{5}},           // b+c, then a+bc
		{[]string{"a b", "b c", "a bc"}, []int32{3, 2}}, // a+b wins; nothing joins ab+c
		{[]string{"b c", "a b", "a bc"}, []int32{5}},
		{[]string{"nospace", "b c"}, []int32{0, 4}}, // malformed merges are ignored
	}
	for _, tc := range tests {
		tok, err := FromGGUF(vocab("gpt2", tokens, nil, types, map[string]any{
			"tokenizer.ggml.pre": "gpt-2", "tokenizer.ggml.merges": tc.merges,
			"tokenizer.ggml.bos_token_id": uint64(0), "tokenizer.ggml.eos_token_id": uint64(0),
		}))
		if err != nil {
			t.Fatal(err)
		}
		if got := tok.Encode("abc", false, false); !slices.Equal(got, tc.want) {
			t.Errorf("merges %q: got %v, want %v", tc.merges, got, tc.want)
		}
	}
}

func TestFromGGUFErrors(t *testing.T) {
	ok := vocab("llama", []string{"<unk>", "<s>", "</s>", "a"}, []float32{0, 0, 0, 0}, []int32{2, 3, 3, 1}, nil)
	if _, err := FromGGUF(ok); err != nil {
		t.Fatalf("valid vocabulary rejected: %v", err)
	}
	with := func(m meta, k string, v any) meta {
		vals := map[string]any{}
		for kk, vv := range m.vals {
			vals[kk] = vv
		}
		if v == nil {
			delete(vals, k)
		} else {
			vals[k] = v
		}
		return meta{vals: vals}
	}
	bpe := with(with(ok, "tokenizer.ggml.model", "gpt2"), "tokenizer.ggml.merges", []string{"a a"})
	if _, err := FromGGUF(bpe); err != nil {
		t.Fatalf("valid BPE vocabulary rejected: %v", err)
	}
	tests := []struct {
		name string
		md   meta
		want string
	}{
		{"no model", with(ok, "tokenizer.ggml.model", nil), "tokenizer.ggml.model is missing"},
		{"bert", with(ok, "tokenizer.ggml.model", "bert"), `unsupported tokenizer model "bert"`},
		{"no tokens", with(ok, "tokenizer.ggml.tokens", nil), "tokens is missing or empty"},
		{"empty tokens", with(ok, "tokenizer.ggml.tokens", []string{}), "tokens is missing or empty"},
		{"short scores", with(ok, "tokenizer.ggml.scores", []float32{0}), "scores has 1 entries for 4 tokens"},
		{"short types", with(ok, "tokenizer.ggml.token_type", []int32{1}), "token_type has 1 entries for 4 tokens"},
		{"duplicate", with(ok, "tokenizer.ggml.tokens", []string{"<unk>", "<s>", "a", "a"}), `duplicate token "a" (ids 2 and 3)`},
		{"bos missing", with(with(ok, "tokenizer.ggml.tokens", []string{"<unk>"}), "tokenizer.ggml.scores", nil), "BOS is to be added"},
		{"eos missing", with(with(with(ok, "tokenizer.ggml.tokens", []string{"<unk>", "<s>"}), "tokenizer.ggml.scores", nil),
			"tokenizer.ggml.add_eos_token", true), "EOS is to be added"},
		{"no merges", with(bpe, "tokenizer.ggml.merges", nil), "tokenizer.ggml.merges is missing"},
		{"unknown pre", with(bpe, "tokenizer.ggml.pre", "tekken"), `unsupported pre-tokenizer "tekken"`},
	}
	for _, tc := range tests {
		_, err := FromGGUF(tc.md)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
	// An empty token text is kept under a placeholder, as llama.cpp.
	tok, err := FromGGUF(with(ok, "tokenizer.ggml.tokens", []string{"<unk>", "<s>", "</s>", ""}))
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.Piece(3); got != "[EMPTY_3]" {
		t.Errorf("empty token rendered %q", got)
	}
}
