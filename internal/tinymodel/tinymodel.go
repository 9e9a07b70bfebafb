// Package tinymodel builds a minimal valid llama GGUF in memory (tiny F32
// weights, a byte-fallback SentencePiece vocabulary) that tests mutate key by
// key or tensor by tensor to produce precisely broken files.
package tinymodel

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/vkinfer/vkinfer/gguf"
	"github.com/vkinfer/vkinfer/quant"
)

// Shape of the model: small enough to run anywhere in microseconds.
const (
	Embd    = 8
	FF      = 16
	Heads   = 2
	KVHeads = 1
	Layers  = 1
	Context = 64
)

// Model is a GGUF file under construction.
type Model struct {
	KV      []gguf.KV
	Tensors []gguf.WriteTensor
}

// New returns a valid tiny llama model.
func New() *Model {
	m := &Model{}
	var tokens []string
	var types []int32
	for _, s := range []string{"<unk>", "<s>", "</s>"} {
		tokens = append(tokens, s)
		types = append(types, 3)
	}
	types[0] = 2
	for b := range 256 {
		tokens = append(tokens, fmt.Sprintf("<0x%02X>", b))
		types = append(types, 6)
	}
	for _, s := range []string{"▁", "▁a", "▁the", "e", "t"} {
		tokens = append(tokens, s)
		types = append(types, 1)
	}
	scores := make([]float32, len(tokens))
	for i := range scores {
		scores[i] = -float32(i)
	}
	m.KV = []gguf.KV{
		{Key: "general.architecture", Value: "llama"},
		{Key: "general.name", Value: "tiny test model"},
		{Key: "llama.context_length", Value: uint32(Context)},
		{Key: "llama.embedding_length", Value: uint32(Embd)},
		{Key: "llama.block_count", Value: uint32(Layers)},
		{Key: "llama.feed_forward_length", Value: uint32(FF)},
		{Key: "llama.attention.head_count", Value: uint32(Heads)},
		{Key: "llama.attention.head_count_kv", Value: uint32(KVHeads)},
		{Key: "llama.attention.layer_norm_rms_epsilon", Value: float32(1e-5)},
		{Key: "llama.rope.dimension_count", Value: uint32(Embd / Heads)},
		{Key: "llama.rope.freq_base", Value: float32(10000)},
		{Key: "tokenizer.ggml.model", Value: "llama"},
		{Key: "tokenizer.ggml.tokens", Value: tokens},
		{Key: "tokenizer.ggml.scores", Value: scores},
		{Key: "tokenizer.ggml.token_type", Value: types},
		{Key: "tokenizer.ggml.bos_token_id", Value: uint32(1)},
		{Key: "tokenizer.ggml.eos_token_id", Value: uint32(2)},
		{Key: "tokenizer.ggml.unknown_token_id", Value: uint32(0)},
	}
	vocab := len(tokens)
	hd := Embd / Heads
	rng := rand.New(rand.NewPCG(1, 2))
	add := func(name string, shape ...int) {
		m.Tensors = append(m.Tensors, f32Tensor(name, rng, shape...))
	}
	add("token_embd.weight", Embd, vocab)
	for l := range Layers {
		p := fmt.Sprintf("blk.%d.", l)
		add(p+"attn_norm.weight", Embd)
		add(p+"attn_q.weight", Embd, Heads*hd)
		add(p+"attn_k.weight", Embd, KVHeads*hd)
		add(p+"attn_v.weight", Embd, KVHeads*hd)
		add(p+"attn_output.weight", Heads*hd, Embd)
		add(p+"ffn_norm.weight", Embd)
		add(p+"ffn_gate.weight", Embd, FF)
		add(p+"ffn_up.weight", Embd, FF)
		add(p+"ffn_down.weight", FF, Embd)
	}
	add("output_norm.weight", Embd)
	add("output.weight", Embd, vocab)
	return m
}

// f32Tensor makes a tensor of random values in [-0.5, 0.5).
func f32Tensor(name string, rng *rand.Rand, shape ...int) gguf.WriteTensor {
	n := 1
	dims := make([]uint64, len(shape))
	for i, d := range shape {
		n *= d
		dims[i] = uint64(d)
	}
	b := make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(rng.Float32()-0.5))
	}
	return gguf.WriteTensor{Name: name, Type: quant.F32, Shape: dims, Data: func() ([]byte, error) { return b, nil }}
}

// Set replaces the value of key, or appends it.
func (m *Model) Set(key string, v any) {
	for i := range m.KV {
		if m.KV[i].Key == key {
			m.KV[i].Value = v
			return
		}
	}
	m.KV = append(m.KV, gguf.KV{Key: key, Value: v})
}

// Delete removes key.
func (m *Model) Delete(key string) {
	m.KV = slices.DeleteFunc(m.KV, func(kv gguf.KV) bool { return kv.Key == key })
}

// Tensor returns the tensor called name; it panics on an unknown name, which
// is a mistake in the test.
func (m *Model) Tensor(name string) *gguf.WriteTensor {
	for i := range m.Tensors {
		if m.Tensors[i].Name == name {
			return &m.Tensors[i]
		}
	}
	panic("tinymodel: no tensor " + name)
}

// DropTensor removes the tensor called name.
func (m *Model) DropTensor(name string) {
	m.Tensors = slices.DeleteFunc(m.Tensors, func(t gguf.WriteTensor) bool { return t.Name == name })
}

// Write writes the model into the test's temp dir and returns the path.
func (m *Model) Write(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tiny.gguf")
	if err := gguf.Write(path, m.KV, m.Tensors); err != nil {
		t.Fatalf("writing the tiny model: %v", err)
	}
	return path
}
