package gguf

import (
	"encoding/binary"
	"runtime"
	"strings"
	"testing"
	"time"
)

// mutate returns validSpec changed by fn, built.
func mutate(fn func(*spec)) []byte {
	s := validSpec()
	fn(&s)
	b, _ := s.build()
	return b
}

// cut returns the valid file truncated at the offset chosen by at.
func cut(at func(marks) int) []byte {
	b, m := validSpec().build()
	return b[:at(m)]
}

// patch returns the valid file with the uint64 at the offset chosen by at
// replaced by v.
func patch(at func(marks) int, v uint64) []byte {
	b, m := validSpec().build()
	binary.LittleEndian.PutUint64(b[at(m):], v)
	return b
}

func setTensor(i int, fn func(*specTensor)) func(*spec) {
	return func(s *spec) { fn(&s.tensors[i]) }
}

func addKV(kv rawKV) func(*spec) {
	return func(s *spec) { s.kvs = append(s.kvs, kv) }
}

func TestValidSpecOpens(t *testing.T) {
	b, m := validSpec().build()
	f, err := Open(writeTemp(t, b))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Arch() != "llama" || len(f.Keys()) != 5 || len(f.Tensors()) != 3 {
		t.Fatalf("arch %q keys %v tensors %d", f.Arch(), f.Keys(), len(f.Tensors()))
	}
	q, _ := f.Tensor("blk.0.attn_q.weight")
	if q.Offset != uint64(m.dataStart)+64 || q.Bytes != 288 || string(f.Data(q)) != string(b[q.Offset:q.Offset+288]) {
		t.Errorf("blk.0.attn_q.weight: %+v", q)
	}
}

type malformedCase struct {
	name string
	file []byte
	want []string // words the error must contain
}

// malformedCases are broken variants of validSpec, one defect each. They are
// also the fuzz seeds.
func malformedCases() []malformedCase {
	const huge = uint64(1) << 62
	return []malformedCase{
		{"empty", nil, []string{"truncated", "header magic", "needs 4 bytes, 0 left"}},
		{"truncated header", cut(func(marks) int { return 10 }), []string{"truncated", "header"}},
		// The last entry, element and tensor info: cutting earlier trips the
		// count checks first (see "huge … count").
		{"truncated in kv key", cut(func(m marks) int { return m.kvKey[4] + 3 }), []string{"truncated", "metadata key 4 needs 12 bytes, 3 left"}},
		{"truncated in kv value", cut(func(m marks) int { return m.kvValue[4] + 14 }), []string{"truncated", `metadata key 4 ("general.name") value`}},
		{"truncated in array", cut(func(m marks) int { return m.kvValue[2] + 4 + 4 + 8 + 9 + 10 + 8 + 1 }), []string{"truncated", `metadata key 2 ("tokenizer.ggml.tokens") array element needs 3 bytes, 1 left`}},
		{"truncated in tensor info", cut(func(m marks) int { return m.tensorInfo[2] + 30 }), []string{"truncated", `tensor "output_norm.weight" shape needs 8 bytes`}},
		{"truncated in data", cut(func(m marks) int { return m.dataStart + 100 }), []string{"blk.0.attn_q.weight", "lies outside the file"}},
		{"bad magic", mutate(func(s *spec) { s.magic = "GGML" }), []string{"not a GGUF file", `"GGML"`}},
		{"version 1", mutate(func(s *spec) { s.version = 1 }), []string{"unsupported GGUF version 1 (only version 3)"}},
		{"version 2", mutate(func(s *spec) { s.version = 2 }), []string{"unsupported GGUF version 2 (only version 3)"}},
		{"version 99", mutate(func(s *spec) { s.version = 99 }), []string{"unsupported GGUF version 99"}},
		{"big-endian", mutate(func(s *spec) { s.version = 3 << 24 }), []string{"big-endian"}},
		{"huge tensor count", mutate(func(s *spec) { s.nTensors = huge }), []string{"declares 4611686018427387904 tensors"}},
		{"huge kv count", mutate(func(s *spec) { s.nKV = huge }), []string{"declares 4611686018427387904 metadata keys"}},
		{"huge string length", mutate(addKV(kvRaw("x.str", func(e *enc) { e.u32(uint32(typeString)); e.u64(huge) }))),
			[]string{"truncated", `metadata key 5 ("x.str") value needs 4611686018427387904 bytes`}},
		{"huge key length", patch(func(m marks) int { return m.kvKey[4] - 8 }, huge), []string{"truncated", "metadata key 4 needs 4611686018427387904 bytes"}},
		{"huge array count", mutate(addKV(kvRaw("x.arr", func(e *enc) { e.u32(uint32(typeArray)); e.u32(uint32(typeUint32)); e.u64(huge) }))),
			[]string{`"x.arr"`, "array of 4611686018427387904 uint32 values cannot fit"}},
		{"huge string array count", mutate(addKV(kvRaw("x.arr", func(e *enc) { e.u32(uint32(typeArray)); e.u32(uint32(typeString)); e.u64(huge) }))),
			[]string{`"x.arr"`, "array of 4611686018427387904 strings cannot fit"}},
		{"nested array bomb", mutate(addKV(kvRaw("x.nest", func(e *enc) {
			for range 8 {
				e.u32(uint32(typeArray))
				e.u32(uint32(typeArray))
				e.u64(huge)
			}
		}))), []string{`"x.nest"`, "arrays of arrays are not supported"}},
		{"unknown value type", mutate(addKV(kvRaw("x.bad", func(e *enc) { e.u32(13); e.u32(0) }))), []string{`"x.bad"`, "unknown value type 13"}},
		{"unknown array element type", mutate(addKV(kvRaw("x.bad", func(e *enc) { e.u32(uint32(typeArray)); e.u32(99); e.u64(1) }))), []string{"unknown array element type 99"}},
		{"duplicate key", mutate(addKV(kvU32("llama.embedding_length", 8))), []string{`duplicate metadata key "llama.embedding_length"`, "entries 1 and 5"}},
		{"alignment not uint32", mutate(addKV(kvRaw(alignmentKey, func(e *enc) { e.u32(uint32(typeUint64)); e.u64(32) }))), []string{alignmentKey, "uint64", "must be uint32"}},
		{"alignment zero", mutate(addKV(kvU32(alignmentKey, 0))), []string{alignmentKey, "0 is not a power of two"}},
		{"alignment not a power of two", mutate(addKV(kvU32(alignmentKey, 48))), []string{"48 is not a power of two"}},
		{"tensor data outside the file", mutate(setTensor(2, func(t *specTensor) { t.off = 1 << 20 })), []string{`tensor "output_norm.weight": data [`, "lies outside the file (size"}},
		{"tensor offset near 2^64", mutate(setTensor(2, func(t *specTensor) { t.off = ^uint64(0) &^ 31 })), []string{`"output_norm.weight"`, "lies outside the file"}},
		{"unknown type id", mutate(setTensor(0, func(t *specTensor) { t.typ = 77 })), []string{`tensor "token_embd.weight"`, "unknown type id 77"}},
		{"9 dims", mutate(setTensor(0, func(t *specTensor) { t.shape = []uint64{1, 1, 1, 1, 1, 1, 1, 1, 1} })), []string{`tensor "token_embd.weight"`, "9 dimensions (must be 1 to 4)"}},
		{"0 dims", mutate(setTensor(0, func(t *specTensor) { t.shape = nil })), []string{"0 dimensions"}},
		{"huge dim count", mutate(setTensor(0, func(t *specTensor) { t.shape = make([]uint64, 1<<16) })), []string{"65536 dimensions"}},
		{"zero dim", mutate(setTensor(0, func(t *specTensor) { t.shape = []uint64{8, 0} })), []string{`tensor "token_embd.weight"`, "dimension 1 of shape [8 0] is zero"}},
		{"element count overflows", mutate(setTensor(0, func(t *specTensor) { t.shape = []uint64{1 << 32, 1 << 32} })), []string{"more than 2^64 elements"}},
		{"byte count overflows", mutate(setTensor(0, func(t *specTensor) { t.shape = []uint64{1 << 62, 1} })), []string{"F32", "more than 2^64 bytes"}},
		{"misaligned offset", mutate(setTensor(2, func(t *specTensor) { t.off = 356 })), []string{`tensor "output_norm.weight"`, "data offset 356 is not a multiple of the alignment 32"}},
		{"ne0 not whole blocks", mutate(setTensor(1, func(t *specTensor) { t.shape = []uint64{100, 2} })), []string{"Q4_K row of 100 values is not a whole number of 256-value blocks"}},
		{"duplicate tensor name", mutate(setTensor(2, func(t *specTensor) { t.name = "token_embd.weight" })), []string{`duplicate tensor name "token_embd.weight"`, "tensors 0 and 2"}},
		{"overlapping tensors", mutate(setTensor(2, func(t *specTensor) { t.off = 320 })), []string{"blk.0.attn_q.weight", "output_norm.weight", "overlap"}},
		{"control bytes in name", mutate(setTensor(0, func(t *specTensor) { t.name = "a\nb"; t.typ = 77 })), []string{`tensor "a\nb"`}},
	}
}

func TestMalformed(t *testing.T) {
	for _, c := range malformedCases() {
		t.Run(c.name, func(t *testing.T) {
			path := writeTemp(t, c.file)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			start := time.Now()
			f, err := Open(path)
			elapsed := time.Since(start)
			runtime.ReadMemStats(&after)
			if err == nil {
				f.Close()
				t.Fatal("Open succeeded")
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") || !strings.HasPrefix(msg, "gguf: ") {
				t.Errorf("error is not one line starting with \"gguf: \": %q", msg)
			}
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not contain %q", msg, w)
				}
			}
			if a := after.TotalAlloc - before.TotalAlloc; a > 1<<20 {
				t.Errorf("Open allocated %d bytes for a %d-byte file", a, len(c.file))
			}
			if elapsed > time.Second {
				t.Errorf("Open took %v", elapsed)
			}
			t.Log(msg)
		})
	}
}
