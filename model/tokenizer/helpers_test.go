package tokenizer

import (
	"sync"
	"testing"

	"github.com/vkinfer/vkinfer/gguf"
	"github.com/vkinfer/vkinfer/internal/fixtures"
)

// loaded caches tokenizers by fixture path: the BPE vocabularies take a
// noticeable time to build and many tests share them.
var loaded sync.Map

// load builds the tokenizer of a shared fixture, e.g.
// load(t, "tokenizer", "ggml-vocab-llama-spm.gguf").
func load(tb testing.TB, rel ...string) *Tokenizer {
	tb.Helper()
	p := fixtures.Path(tb, rel...)
	if tok, ok := loaded.Load(p); ok {
		return tok.(*Tokenizer)
	}
	f, err := gguf.Open(p)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	tok, err := FromGGUF(f)
	if err != nil {
		tb.Fatalf("%s: %v", p, err)
	}
	loaded.Store(p, tok)
	return tok
}

// meta is an in-memory Metadata for hand-made vocabularies and for
// overriding keys of a real one.
type meta struct {
	base Metadata // consulted for keys not in vals; may be nil
	vals map[string]any
}

func (m meta) get(key string) (any, bool) {
	v, ok := m.vals[key]
	return v, ok
}

func (m meta) String(key string) (string, bool) {
	if v, ok := m.get(key); ok {
		s, ok := v.(string)
		return s, ok
	}
	if m.base != nil {
		return m.base.String(key)
	}
	return "", false
}

func (m meta) Uint(key string) (uint64, bool) {
	if v, ok := m.get(key); ok {
		u, ok := v.(uint64)
		return u, ok
	}
	if m.base != nil {
		return m.base.Uint(key)
	}
	return 0, false
}

func (m meta) Bool(key string) (bool, bool) {
	if v, ok := m.get(key); ok {
		b, ok := v.(bool)
		return b, ok
	}
	if m.base != nil {
		return m.base.Bool(key)
	}
	return false, false
}

func (m meta) Strings(key string) ([]string, bool) {
	if v, ok := m.get(key); ok {
		s, ok := v.([]string)
		return append([]string(nil), s...), ok
	}
	if m.base != nil {
		return m.base.Strings(key)
	}
	return nil, false
}

func (m meta) Float32s(key string) ([]float32, bool) {
	if v, ok := m.get(key); ok {
		s, ok := v.([]float32)
		return s, ok
	}
	if m.base != nil {
		return m.base.Float32s(key)
	}
	return nil, false
}

func (m meta) Int32s(key string) ([]int32, bool) {
	if v, ok := m.get(key); ok {
		s, ok := v.([]int32)
		return s, ok
	}
	if m.base != nil {
		return m.base.Int32s(key)
	}
	return nil, false
}

// fixturesMeta opens a tokenizer fixture's metadata for the life of the
// test.
func fixturesMeta(tb testing.TB, name string) Metadata {
	tb.Helper()
	f, err := gguf.Open(fixtures.Path(tb, "tokenizer", name))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { f.Close() })
	return f
}
