package tokenizer

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// randomText draws n characters from scripts that exercise whole-word
// tokens, multi-byte merges and (for SentencePiece) byte fallback of 2-, 3-
// and 4-byte characters.
func randomText(rng *rand.Rand, n int) string {
	ranges := [][2]rune{
		{0x20, 0x7E}, {'\n', '\n'}, {'\t', '\t'}, // ASCII
		{0xA0, 0x17F},      // Latin-1, Latin Extended-A
		{0x391, 0x3C9},     // Greek
		{0x400, 0x44F},     // Cyrillic
		{0x300, 0x36F},     // combining marks
		{0x1780, 0x17DD},   // Khmer
		{0x4E00, 0x4FFF},   // CJK
		{0xAC00, 0xAD00},   // Hangul
		{0x1F300, 0x1F64F}, // emoji
		{0x10330, 0x1034A}, // Gothic
	}
	var b strings.Builder
	for range n {
		r := ranges[rng.IntN(len(ranges))]
		b.WriteRune(r[0] + rune(rng.IntN(int(r[1]-r[0]+1))))
	}
	return b.String()
}

// decodeStream feeds ids to a Decoder one at a time, failing on any chunk
// that is not valid UTF-8, and returns the whole text.
func decodeStream(t *testing.T, tok *Tokenizer, ids []int32) string {
	t.Helper()
	d := tok.NewDecoder()
	var out strings.Builder
	for _, id := range ids {
		chunk := d.Add(id)
		if !utf8.ValidString(chunk) {
			t.Fatalf("Add(%d) returned invalid UTF-8 %q", id, chunk)
		}
		out.WriteString(chunk)
	}
	rest := d.Flush()
	if !utf8.ValidString(rest) {
		t.Fatalf("Flush returned invalid UTF-8 %q", rest)
	}
	out.WriteString(rest)
	return out.String()
}

// TestEncodeDecodeRoundTrip encodes random text and streams it back: the
// text must come back exactly (SentencePiece adds its leading space).
func TestEncodeDecodeRoundTrip(t *testing.T) {
	for _, name := range vocabs {
		tok := load(t, "tokenizer", "ggml-vocab-"+name+".gguf")
		rng := rand.New(rand.NewPCG(1, uint64(len(name))))
		for i := range 100 {
			text := randomText(rng, 1+rng.IntN(60))
			want := text
			if tok.Model() == modelSPM {
				want = " " + text
			}
			ids := tok.Encode(text, false, false)
			if got := decodeStream(t, tok, ids); got != want {
				t.Fatalf("%s #%d: %q came back as %q (ids %v)", name, i, text, got, ids)
			}
		}
	}
}

// TestDecoderPartialCharacters feeds the byte tokens of multi-byte
// characters one by one: nothing comes out until a character is complete,
// invalid bytes become U+FFFD, and control tokens are silent.
func TestDecoderPartialCharacters(t *testing.T) {
	tok := load(t, "tokenizer", "ggml-vocab-llama-spm.gguf")
	byteTok := func(b byte) int32 { return tok.byteTokens[b] }
	d := tok.NewDecoder()
	steps := []struct {
		id   int32
		want string
	}{
		{tok.BOS(), ""},
		{byteTok(0xE2), ""}, {byteTok(0x82), ""}, {byteTok(0xAC), "€"},
		{byteTok(0xF0), ""}, {byteTok(0x9F), ""}, {byteTok(0x98), ""}, {byteTok(0x80), "😀"},
		{byteTok(0xE2), ""}, {byteTok('A'), "\uFFFDA"}, // a sequence cut short
		{byteTok(0xFF), "\uFFFD"}, // never valid
		{byteTok(0x80), "\uFFFD"}, // stray continuation
		{15043, " Hello"},
		{tok.EOS(), ""},
		{-5, ""}, {1 << 30, ""},
		{byteTok(0xF0), ""}, {byteTok(0x9F), ""},
	}
	for i, s := range steps {
		if got := d.Add(s.id); got != s.want {
			t.Fatalf("step %d Add(%d) = %q, want %q", i, s.id, got, s.want)
		}
	}
	if got := d.Flush(); got != "\uFFFD\uFFFD" {
		t.Errorf("Flush = %q, want two U+FFFD", got)
	}
	if got := d.Flush(); got != "" {
		t.Errorf("second Flush = %q", got)
	}
	// Text from SentencePiece's byte fallback: this Khmer sign has no token.
	ids := tok.Encode("\u17cb", false, false)
	if len(ids) != 4 { // ▁ and three byte tokens
		t.Fatalf("U+17CB encoded as %v, want ▁ and three bytes", ids)
	}
	if got := decodeStream(t, tok, ids); got != " \u17cb" {
		t.Errorf("got %q", got)
	}
}
