package tokenizer

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/vkinfer/vkinfer/internal/fixtures"
)

// vocabs are llama.cpp's tokenizer test vocabularies (models/ggml-vocab-*).
var vocabs = []string{"llama-spm", "llama-bpe", "qwen2", "gpt-2", "phi-3"}

// readVocabTests reads a .inp/.out pair as llama.cpp's test-tokenizer-0:
// inputs separated by "\n__ggml_vocab_test__\n", one line of ids per input.
func readVocabTests(t *testing.T, name string) (inputs []string, want [][]int32) {
	t.Helper()
	base := "ggml-vocab-" + name + ".gguf"
	inp, err := os.ReadFile(fixtures.Path(t, "tokenizer", base+".inp"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.ReadFile(fixtures.Path(t, "tokenizer", base+".out"))
	if err != nil {
		t.Fatal(err)
	}
	const sep = "\n__ggml_vocab_test__\n"
	for raw := string(inp); raw != ""; {
		i := strings.Index(raw, sep)
		if i < 0 {
			inputs = append(inputs, raw)
			break
		}
		inputs = append(inputs, raw[:i])
		raw = raw[i+len(sep):]
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != len(inputs) {
		t.Fatalf("%s: %d inputs but %d output lines", base, len(inputs), len(lines))
	}
	for _, l := range lines {
		ids := []int32{}
		for _, f := range strings.Fields(l) {
			v, err := strconv.ParseInt(f, 10, 32)
			if err != nil {
				t.Fatalf("%s: %v", base, err)
			}
			ids = append(ids, int32(v))
		}
		want = append(want, ids)
	}
	return inputs, want
}

// TestVocabVectors checks every input of llama.cpp's test-tokenizer-0 files
// against the ids llama.cpp produced, with its settings: no BOS/EOS
// (add_special false) and special tokens not parsed.
func TestVocabVectors(t *testing.T) {
	for _, name := range vocabs {
		t.Run(name, func(t *testing.T) {
			tok := load(t, "tokenizer", "ggml-vocab-"+name+".gguf")
			inputs, want := readVocabTests(t, name)
			pass := 0
			for i, in := range inputs {
				got := tok.Encode(in, false, false)
				if slices.Equal(got, want[i]) {
					pass++
					continue
				}
				t.Errorf("input %d %q:\n got  %v\n want %v", i, in, got, want[i])
			}
			t.Logf("%s: %d/%d strings match llama.cpp", name, pass, len(inputs))
		})
	}
}
