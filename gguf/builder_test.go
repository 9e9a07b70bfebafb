package gguf

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// This file builds small GGUF files byte by byte for the reader tests,
// independently of Write, and records where each section starts so tests can
// cut or corrupt a file at a chosen place.

// enc appends little-endian GGUF encodings.
type enc struct{ b []byte }

func (e *enc) u32(v uint32) { e.b = binary.LittleEndian.AppendUint32(e.b, v) }
func (e *enc) u64(v uint64) { e.b = binary.LittleEndian.AppendUint64(e.b, v) }
func (e *enc) str(s string) { e.u64(uint64(len(s))); e.b = append(e.b, s...) }

// rawKV is one metadata entry; value writes its type id and value.
type rawKV struct {
	key   string
	value func(*enc)
}

func kvString(key, v string) rawKV {
	return rawKV{key, func(e *enc) { e.u32(uint32(typeString)); e.str(v) }}
}

func kvU32(key string, v uint32) rawKV {
	return rawKV{key, func(e *enc) { e.u32(uint32(typeUint32)); e.u32(v) }}
}

func kvStrings(key string, vs ...string) rawKV {
	return rawKV{key, func(e *enc) {
		e.u32(uint32(typeArray))
		e.u32(uint32(typeString))
		e.u64(uint64(len(vs)))
		for _, v := range vs {
			e.str(v)
		}
	}}
}

func kvFloat32s(key string, vs ...float32) rawKV {
	return rawKV{key, func(e *enc) {
		e.u32(uint32(typeArray))
		e.u32(uint32(typeFloat32))
		e.u64(uint64(len(vs)))
		for _, v := range vs {
			e.u32(math.Float32bits(v))
		}
	}}
}

// kvRaw writes the value bytes verbatim, for entries no valid file holds.
func kvRaw(key string, value func(*enc)) rawKV { return rawKV{key, value} }

type specTensor struct {
	name  string
	shape []uint64
	typ   uint32
	off   uint64 // relative to the data section
}

// spec describes a file. Zero counts mean "as many as listed"; set them to
// declare counts the file does not hold.
type spec struct {
	magic         string
	version       uint32
	nTensors, nKV uint64
	kvs           []rawKV
	tensors       []specTensor
	align         uint64
	data          []byte
}

// marks are the offsets of the sections of a built file.
type marks struct {
	kvKey, kvValue []int // start of each key string's bytes and of each value (its type id)
	tensorInfo     []int
	dataStart      int
}

// validSpec is a small well-formed file: metadata of several types and three
// tensors of different types packed back to back.
func validSpec() spec {
	data := make([]byte, 360)
	for i := range data {
		data[i] = byte(i*7 + 3)
	}
	return spec{
		magic:   "GGUF",
		version: 3,
		kvs: []rawKV{
			kvString("general.architecture", "llama"),
			kvU32("llama.embedding_length", 64),
			kvStrings("tokenizer.ggml.tokens", "a", "bc", "def"),
			kvFloat32s("tokenizer.ggml.scores", 0.5, -1, 2),
			kvString("general.name", "tiny test"),
		},
		tensors: []specTensor{
			{"token_embd.weight", []uint64{8, 2}, 0, 0},       // F32, 64 bytes
			{"blk.0.attn_q.weight", []uint64{256, 2}, 12, 64}, // Q4_K, 288 bytes
			{"output_norm.weight", []uint64{4}, 1, 64 + 288},  // F16, 8 bytes
		},
		align: 32,
		data:  data,
	}
}

func (s spec) build() ([]byte, marks) {
	var m marks
	e := &enc{b: []byte(s.magic)}
	e.u32(s.version)
	e.u64(orLen(s.nTensors, len(s.tensors)))
	e.u64(orLen(s.nKV, len(s.kvs)))
	for _, kv := range s.kvs {
		m.kvKey = append(m.kvKey, len(e.b)+8)
		e.str(kv.key)
		m.kvValue = append(m.kvValue, len(e.b))
		kv.value(e)
	}
	for _, t := range s.tensors {
		m.tensorInfo = append(m.tensorInfo, len(e.b))
		e.str(t.name)
		e.u32(uint32(len(t.shape)))
		for _, d := range t.shape {
			e.u64(d)
		}
		e.u32(t.typ)
		e.u64(t.off)
	}
	for uint64(len(e.b))%s.align != 0 {
		e.b = append(e.b, 0)
	}
	m.dataStart = len(e.b)
	return append(e.b, s.data...), m
}

func orLen(n uint64, l int) uint64 {
	if n != 0 {
		return n
	}
	return uint64(l)
}

// writeTemp writes b to a fresh file and returns its path.
func writeTemp(t testing.TB, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "test.gguf")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
