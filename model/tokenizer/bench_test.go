package tokenizer

import (
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/vkinfer/vkinfer/internal/fixtures"
)

// BenchmarkEncode tokenizes about 64 KiB of mixed text: llama.cpp's test
// strings (English, code-like text, Cyrillic, Khmer, emoji, CJK) and random
// characters from many scripts.
func BenchmarkEncode(b *testing.B) {
	inp, err := os.ReadFile(fixtures.Path(b, "tokenizer", "ggml-vocab-llama-spm.gguf.inp"))
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 7))
	var sb strings.Builder
	for sb.Len() < 64<<10 {
		sb.Write(inp)
		sb.WriteString(randomText(rng, 200))
	}
	text := sb.String()
	for _, name := range vocabs {
		tok := load(b, "tokenizer", "ggml-vocab-"+name+".gguf")
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			n := 0
			for b.Loop() {
				n = len(tok.Encode(text, true, true))
			}
			b.ReportMetric(float64(n), "tokens")
		})
	}
}
