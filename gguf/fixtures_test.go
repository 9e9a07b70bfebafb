package gguf

import (
	"testing"

	"github.com/vkinfer/vkinfer/internal/fixtures"
	"github.com/vkinfer/vkinfer/quant"
)

func openFixture(t *testing.T, rel ...string) *File {
	t.Helper()
	f, err := Open(fixtures.Path(t, rel...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Error(err)
		}
	})
	return f
}

// typeCounts counts the tensors of each type and checks every tensor's data
// slice against its declared size.
func typeCounts(t *testing.T, f *File) map[quant.Type]int {
	t.Helper()
	n := map[quant.Type]int{}
	for _, ts := range f.Tensors() {
		n[ts.Type]++
		if d := f.Data(ts); uint64(len(d)) != ts.Bytes {
			t.Errorf("tensor %s: Data has %d bytes, Bytes is %d", ts.Name, len(d), ts.Bytes)
		}
	}
	return n
}

func TestFixtureStories260K(t *testing.T) {
	f := openFixture(t, "stories260K.gguf")
	if f.Version() != 3 || f.Arch() != "llama" || f.Size() != 1185376 {
		t.Errorf("version %d arch %q size %d", f.Version(), f.Arch(), f.Size())
	}
	checkUint(t, f, "llama.embedding_length", 64)
	checkUint(t, f, "llama.feed_forward_length", 172)
	checkUint(t, f, "llama.block_count", 5)
	checkUint(t, f, "llama.attention.head_count", 8)
	checkUint(t, f, "llama.attention.head_count_kv", 4)
	checkUint(t, f, "llama.context_length", 2048)
	if n := typeCounts(t, f); n[quant.F32] != 48 || len(n) != 1 {
		t.Errorf("tensor types %v, want 48 F32", n)
	}
	if f.Has("general.parameter_count") {
		t.Error("general.parameter_count is invented by ggml.Decode, not in the file")
	}
	tokens, ok := f.Strings("tokenizer.ggml.tokens")
	scores, ok2 := f.Float32s("tokenizer.ggml.scores")
	types, ok3 := f.Int32s("tokenizer.ggml.token_type")
	if !ok || !ok2 || !ok3 || len(tokens) != 512 || len(scores) != 512 || len(types) != 512 {
		t.Errorf("tokenizer arrays: %d %v, %d %v, %d %v", len(tokens), ok, len(scores), ok2, len(types), ok3)
	}
	emb, ok := f.Tensor("token_embd.weight")
	if !ok || emb.Type != quant.F32 || len(emb.Shape) != 2 || emb.Shape[0] != 64 || emb.Shape[1] != 512 || emb.Elements() != 64*512 {
		t.Fatalf("token_embd.weight: %+v", emb)
	}
	if emb.Offset%32 != 0 || emb.Bytes != 64*512*4 {
		t.Errorf("token_embd.weight offset %d bytes %d", emb.Offset, emb.Bytes)
	}
}

func TestFixtureTinyRandom(t *testing.T) {
	f := openFixture(t, "llama-2-tiny-random.gguf")
	checkUint(t, f, "llama.embedding_length", 8)
	if n := typeCounts(t, f); n[quant.F16] != 9 || n[quant.F32] != 3 || len(n) != 2 {
		t.Errorf("tensor types %v, want F16 ×9, F32 ×3", n)
	}
	if tokens, _ := f.Strings("tokenizer.ggml.tokens"); len(tokens) != 32000 {
		t.Errorf("%d tokens, want 32000", len(tokens))
	}
}

func TestFixtureDerived(t *testing.T) {
	for _, c := range []struct {
		file string
		want map[quant.Type]int
	}{
		{"stories260K-pad256-q4_k_m.gguf", map[quant.Type]int{quant.Q4_K: 32, quant.Q6_K: 5, quant.F32: 11}},
		{"stories260K-pad256-q6_k.gguf", map[quant.Type]int{quant.Q6_K: 37, quant.F32: 11}},
		{"stories260K-pad256-q8_0.gguf", map[quant.Type]int{quant.Q8_0: 37, quant.F32: 11}},
	} {
		t.Run(c.file, func(t *testing.T) {
			f := openFixture(t, "derived", c.file)
			checkUint(t, f, "llama.embedding_length", 256)
			n := typeCounts(t, f)
			if len(n) != len(c.want) {
				t.Errorf("tensor types %v, want %v", n, c.want)
			}
			for typ, k := range c.want {
				if n[typ] != k {
					t.Errorf("%d %s tensors, want %d", n[typ], typ, k)
				}
			}
		})
	}
}

func TestFixtureTokenizers(t *testing.T) {
	for _, c := range []struct {
		file, model    string
		tokens, merges int
	}{
		{"ggml-vocab-llama-spm.gguf", "llama", 32000, 0},
		{"ggml-vocab-llama-bpe.gguf", "gpt2", 128256, 280147},
		{"ggml-vocab-qwen2.gguf", "gpt2", 151936, 151387},
		{"ggml-vocab-gpt-2.gguf", "gpt2", 50257, 50000},
		{"ggml-vocab-phi-3.gguf", "llama", 32064, 0},
	} {
		t.Run(c.file, func(t *testing.T) {
			f := openFixture(t, "tokenizer", c.file)
			if m, _ := f.String("tokenizer.ggml.model"); m != c.model {
				t.Errorf("tokenizer.ggml.model %q, want %q", m, c.model)
			}
			tokens, ok := f.Strings("tokenizer.ggml.tokens")
			if !ok || len(tokens) != c.tokens {
				t.Errorf("%d tokens (%v), want %d", len(tokens), ok, c.tokens)
			}
			merges, ok := f.Strings("tokenizer.ggml.merges")
			if ok != (c.merges > 0) || len(merges) != c.merges {
				t.Errorf("%d merges (%v), want %d", len(merges), ok, c.merges)
			}
			if len(f.Tensors()) != 0 {
				t.Errorf("%d tensors, want 0", len(f.Tensors()))
			}
		})
	}
}

func checkUint(t *testing.T, f *File, key string, want uint64) {
	t.Helper()
	if v, ok := f.Uint(key); !ok || v != want {
		t.Errorf("%s = %d (%v), want %d", key, v, ok, want)
	}
}
