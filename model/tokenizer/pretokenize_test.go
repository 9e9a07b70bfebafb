package tokenizer

import (
	"slices"
	"testing"
	"unicode/utf8"
)

// splitPlain pre-tokenizes text and returns the words as plain text.
func splitPlain(p preTokenizer, text string) []string {
	var sp splitter
	var out []string
	for _, w := range sp.words(p, text) {
		out = append(out, byteDecode(w))
	}
	return out
}

// TestPreTokenizers pins the word boundaries of each expression on inputs
// worked out by hand from the regular expressions; each row exercises one
// alternative or one place where the expressions differ.
func TestPreTokenizers(t *testing.T) {
	tests := []struct {
		pre  string
		in   string
		want []string
	}{
		// Llama 3
		{"llama-bpe", "Hello world", []string{"Hello", " world"}},
		{"llama-bpe", "  Hello", []string{" ", " Hello"}},             // \s+(?!\S) leaves the last space to the word
		{"llama-bpe", "a  ", []string{"a", "  "}},                     // trailing spaces stay together
		{"llama-bpe", "12345", []string{"123", "45"}},                 // \p{N}{1,3}
		{"llama-bpe", "I'M here", []string{"I", "'M", " here"}},       // contractions ignore case
		{"llama-bpe", "x   \ny", []string{"x", "   \n", "y"}},         // \s*[\r\n]+
		{"llama-bpe", "!!!\n\nok", []string{"!!!\n\n", "ok"}},         // punctuation takes following newlines
		{"llama-bpe", "'x 3.14", []string{"'x", " ", "3", ".", "14"}}, // [^\r\n\p{L}\p{N}]?\p{L}+
		{"llama-bpe", "我想在apple", []string{"我想在apple"}},               // Han letters are \p{L}
		{"llama-bpe", "a ", []string{"a", " "}},                       // a space ending the text
		{"llama-bpe", "\u00a0\u3000x", []string{"\u00a0", "\u3000x"}}, // non-ASCII White_Space
		// Qwen2: one digit per word, otherwise Llama 3.
		{"qwen2", "12345", []string{"1", "2", "3", "4", "5"}},
		{"qwen2", "I'M 42x", []string{"I", "'M", " ", "4", "2", "x"}},
		// GPT-2
		{"gpt-2", "I'M", []string{"I", "'", "M"}},                   // contractions are case-sensitive
		{"gpt-2", "it's", []string{"it", "'s"}},                     // ...and lower case matches
		{"gpt-2", "a\n\nb", []string{"a", "\n", "\n", "b"}},         // no \s*[\r\n]+ alternative
		{"gpt-2", " 123abc", []string{" 123", "abc"}},               // ' ?\p{N}+' keeps all digits
		{"gpt-2", "Hello  world", []string{"Hello", " ", " world"}}, // \s+(?!\S)
		{"gpt-2", " +=", []string{" +="}},
		// default: punctuation runs first, then GPT-2, \p{N}+ and digit triples.
		{"default", " +=", []string{" ", "+="}},
		{"default", "x1234567y", []string{"x", "123", "456", "7", "y"}},
		{"default", "hello, world!", []string{"hello", ",", " world", "!"}},
		{"default", "a`b", []string{"a", "`", "b"}}, // backtick is a symbol, not in the class
	}
	for _, tc := range tests {
		got := splitPlain(preTokenizers[tc.pre], tc.in)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s %q: got %q, want %q", tc.pre, tc.in, got, tc.want)
		}
	}
}

// TestDecodeLenient checks the UTF-8 reading llama.cpp's BPE path applies.
func TestDecodeLenient(t *testing.T) {
	tests := []struct {
		in   string
		want []rune
	}{
		{"aé€😀", []rune{'a', 'é', '€', '😀'}},
		{"\xff", []rune{utf8.RuneError}},
		{"\xe2\x82", []rune{utf8.RuneError, utf8.RuneError}}, // truncated: each byte
		{"\x80a", []rune{utf8.RuneError, 'a'}},               // stray continuation byte
		{"\xc0\x80", []rune{0}},                              // overlong form accepted
		{"\xed\xa0\x80", []rune{0xD800}},                     // surrogate accepted
		{"\xf4\x90\x80\x80", []rune{utf8.RuneError, utf8.RuneError, utf8.RuneError, utf8.RuneError}}, // above U+10FFFF
	}
	for _, tc := range tests {
		if got := decodeLenient(tc.in, nil); !slices.Equal(got, tc.want) {
			t.Errorf("%q: got %U, want %U", tc.in, got, tc.want)
		}
	}
	if got := string(appendCpt(nil, 0xD800)); got != "\xed\xa0\x80" {
		t.Errorf("surrogate re-encoded as %q", got)
	}
}

// TestByteLevelAlphabet checks GPT-2's byte mapping: a bijection onto
// printable characters that leaves printable Latin-1 alone.
func TestByteLevelAlphabet(t *testing.T) {
	seen := map[string]bool{}
	for b := range 256 {
		s := byteEnc[b]
		if seen[s] {
			t.Fatalf("byte %#x maps to %q twice", b, s)
		}
		seen[s] = true
		if got := byteDecode(s); got != string([]byte{byte(b)}) {
			t.Errorf("byte %#x: %q decodes to %q", b, s, got)
		}
	}
	for in, want := range map[byte]string{' ': "Ġ", '\n': "Ċ", 'a': "a", 0xAD: "Ń", 0xFF: "ÿ"} {
		if byteEnc[in] != want {
			t.Errorf("byte %#x: got %q, want %q", in, byteEnc[in], want)
		}
	}
}
