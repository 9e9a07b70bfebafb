package tokenizer

import (
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/vkinfer/vkinfer/internal/fixtures"
)

// FuzzEncode feeds arbitrary bytes to every tokenizer. Encode must not
// panic and must return ids inside the vocabulary, and without special
// parsing the tokens must spell the input: for SentencePiece their texts
// (byte tokens as their byte) give the input with its leading space and
// spaces as ▁, byte for byte; for BPE the pieces give the text as llama.cpp
// reads it (invalid bytes as U+FFFD). The default BPE pre-tokenizer runs on
// the GPT-2 vocabulary.
func FuzzEncode(f *testing.F) {
	inp, err := os.ReadFile(fixtures.Path(f, "tokenizer", "ggml-vocab-llama-spm.gguf.inp"))
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range strings.Split(string(inp), "\n__ggml_vocab_test__\n") {
		f.Add([]byte(s))
	}
	for _, s := range []string{"", "\xff\xfe", "\xe2\x82", "\xc0\x80 \xed\xa0\x80", "<s>a</s>", "<|eot_id|><|im_end|>", "[PAD151646]", "\u2581x", " \n\r\t\v\f"} {
		f.Add([]byte(s))
	}
	toks := []*Tokenizer{}
	for _, name := range vocabs {
		toks = append(toks, load(f, "tokenizer", "ggml-vocab-"+name+".gguf"))
	}
	def, err := FromGGUF(meta{base: fixturesMeta(f, "ggml-vocab-gpt-2.gguf"), vals: map[string]any{"tokenizer.ggml.pre": "default"}})
	if err != nil {
		f.Fatal(err)
	}
	toks = append(toks, def)

	f.Fuzz(func(t *testing.T, data []byte) {
		text := string(data)
		for _, tok := range toks {
			for _, parse := range []bool{false, true} {
				for _, id := range tok.Encode(text, parse, parse) {
					if id < 0 || int(id) >= tok.VocabSize() {
						t.Fatalf("%s: id %d outside the vocabulary", tok.Model(), id)
					}
				}
			}
			ids := tok.Encode(text, false, false)
			if tok.Model() == modelSPM {
				if text == "" {
					continue
				}
				// A byte the input's UTF-8 does not explain can swallow a
				// following ▁ into byte tokens, so compare before unescaping.
				want := strings.ReplaceAll(" "+text, " ", spaceMarker)
				if got := spellSPM(tok, ids); got != want {
					t.Fatalf("%q spelled as %q", text, got)
				}
				continue
			}
			want := string(normalizeBPE(text))
			if utf8.ValidString(text) && want != text {
				t.Fatalf("valid UTF-8 %q changed by reading", text)
			}
			if got := concatPieces(tok, ids); got != want {
				t.Fatalf("%q came back as %q", text, got)
			}
		}
	})
}

// normalizeBPE is the text BPE sees: decoded as llama.cpp does and encoded
// again.
func normalizeBPE(s string) []byte {
	var b []byte
	for _, r := range decodeLenient(s, nil) {
		b = appendCpt(b, r)
	}
	return b
}

// spellSPM concatenates the texts of SentencePiece tokens, byte tokens as
// their byte.
func spellSPM(tok *Tokenizer, ids []int32) string {
	var b strings.Builder
	for _, id := range ids {
		if c, ok := parseByteToken(tok.tokens[id]); ok && tok.attrs[id]&attrByte != 0 {
			b.WriteByte(c)
		} else {
			b.WriteString(tok.tokens[id])
		}
	}
	return b.String()
}
