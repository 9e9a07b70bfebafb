package gguf

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/vkinfer/vkinfer/quant"
)

// allKVs holds one entry of every value type Write accepts, including a file
// value for the key ggml.Decode invents.
func allKVs() []KV {
	return []KV{
		{"general.architecture", "llama"},
		{"x.bool", true},
		{"x.u8", uint8(200)},
		{"x.i8", int8(-100)},
		{"x.u16", uint16(60000)},
		{"x.i16", int16(-30000)},
		{"x.u32", uint32(4000000000)},
		{"x.i32", int32(-2000000000)},
		{"x.u64", uint64(math.MaxUint64)},
		{"x.i64", int64(math.MinInt64)},
		{"x.f32", float32(1.5)},
		{"x.f64", math.Pi},
		{"x.empty", ""},
		{"general.parameter_count", uint64(12345)},
		{"x.strings", []string{"", "a", "héllo", "\x00\n"}},
		{"x.f32s", []float32{0.5, float32(math.Inf(-1)), -0}},
		{"x.i32s", []int32{-1, 0, math.MaxInt32}},
		{"x.u32s", []uint32{1, 2, math.MaxUint32}},
		{"x.u8s", []uint8{1, 255}},
		{"x.i8s", []int8{-128, 127}},
		{"x.u16s", []uint16{65535}},
		{"x.i16s", []int16{-32768}},
		{"x.u64s", []uint64{1 << 40}},
		{"x.i64s", []int64{-5, 7}},
		{"x.f64s", []float64{math.E}},
		{"x.bools", []bool{true, false, true}},
		{"x.none", []string{}},
	}
}

// randTensor makes a tensor with random bytes; calls counts Data calls.
func randTensor(name string, typ quant.Type, calls *[]string, shape ...uint64) (WriteTensor, []byte) {
	n, err := tensorBytes(typ, shape)
	if err != nil {
		panic(err)
	}
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rand.Uint32())
	}
	return WriteTensor{name, typ, shape, func() ([]byte, error) {
		*calls = append(*calls, name)
		return b, nil
	}}, b
}

func TestWriteRoundTrip(t *testing.T) {
	for _, align := range []uint32{0, 64} {
		t.Run(fmt.Sprint("align", align), func(t *testing.T) {
			kvs := allKVs()
			wantAlign := uint64(defaultAlignment)
			if align != 0 {
				kvs = append(kvs, KV{alignmentKey, align})
				wantAlign = uint64(align)
			}
			var calls []string
			var ts []WriteTensor
			want := map[string][]byte{}
			for _, c := range []struct {
				name  string
				typ   quant.Type
				shape []uint64
			}{
				{"a.f32", quant.F32, []uint64{7, 3}},
				{"b.q4k", quant.Q4_K, []uint64{512, 2}},
				{"c.q6k", quant.Q6_K, []uint64{256, 1, 1}},
				{"d.q8", quant.Q8_0, []uint64{64, 3, 1, 2}},
				{"e.f16", quant.F16, []uint64{5}},
			} {
				wt, b := randTensor(c.name, c.typ, &calls, c.shape...)
				ts = append(ts, wt)
				want[c.name] = b
			}
			path := filepath.Join(t.TempDir(), "rt.gguf")
			if err := Write(path, kvs, ts); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(calls, []string{"a.f32", "b.q4k", "c.q6k", "d.q8", "e.f16"}) {
				t.Errorf("Data calls %v, want each once in order", calls)
			}
			f, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			var keys []string
			for _, kv := range kvs {
				keys = append(keys, kv.Key)
				if got := f.meta[kv.Key]; !reflect.DeepEqual(got, kv.Value) {
					t.Errorf("%s = %#v, want %#v", kv.Key, got, kv.Value)
				}
			}
			slices.Sort(keys)
			if !slices.Equal(f.Keys(), keys) {
				t.Errorf("keys %v, want %v", f.Keys(), keys)
			}
			got := f.Tensors()
			if len(got) != len(ts) {
				t.Fatalf("%d tensors, want %d", len(got), len(ts))
			}
			for i, g := range got {
				w := ts[i]
				if g.Name != w.Name || g.Type != w.Type || !slices.Equal(g.Shape, w.Shape) || g.Offset%wantAlign != 0 {
					t.Errorf("tensor %d: %+v, want %s %s %v aligned to %d", i, g, w.Name, w.Type, w.Shape, wantAlign)
				}
				if d := f.Data(g); string(d) != string(want[g.Name]) {
					t.Errorf("tensor %s: data differs", g.Name)
				}
			}
		})
	}
}

// writeOpen writes kvs (and no tensors) and opens the result.
func writeOpen(t *testing.T, kvs []KV) *File {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kv.gguf")
	if err := Write(path, kvs, nil); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestGetters(t *testing.T) {
	f := writeOpen(t, allKVs())
	if v, ok := f.Uint("x.u64"); !ok || v != math.MaxUint64 {
		t.Errorf("Uint(x.u64) = %d, %v", v, ok)
	}
	if v, ok := f.Uint("x.u8"); !ok || v != 200 {
		t.Errorf("Uint(x.u8) = %d, %v", v, ok)
	}
	if _, ok := f.Uint("x.i8"); ok {
		t.Error("Uint of a negative int8 succeeded")
	}
	if v, ok := f.Uint("general.parameter_count"); !ok || v != 12345 {
		t.Errorf("general.parameter_count = %d, %v; want the file's 12345, not Decode's sum", v, ok)
	}
	if v, ok := f.Int("x.i64"); !ok || v != math.MinInt64 {
		t.Errorf("Int(x.i64) = %d, %v", v, ok)
	}
	if v, ok := f.Int("x.u32"); !ok || v != 4000000000 {
		t.Errorf("Int(x.u32) = %d, %v", v, ok)
	}
	if _, ok := f.Int("x.u64"); ok {
		t.Error("Int of MaxUint64 succeeded")
	}
	if v, ok := f.Float("x.f32"); !ok || v != 1.5 {
		t.Errorf("Float(x.f32) = %v, %v", v, ok)
	}
	if v, ok := f.Float("x.f64"); !ok || v != math.Pi {
		t.Errorf("Float(x.f64) = %v, %v", v, ok)
	}
	if v, ok := f.Float("x.i16"); !ok || v != -30000 {
		t.Errorf("Float(x.i16) = %v, %v", v, ok)
	}
	if v, ok := f.Bool("x.bool"); !ok || !v {
		t.Errorf("Bool(x.bool) = %v, %v", v, ok)
	}
	if v, ok := f.String("x.empty"); !ok || v != "" {
		t.Errorf("String(x.empty) = %q, %v", v, ok)
	}
	if v, ok := f.Strings("x.strings"); !ok || !slices.Equal(v, []string{"", "a", "héllo", "\x00\n"}) {
		t.Errorf("Strings(x.strings) = %q, %v", v, ok)
	}
	if v, ok := f.Strings("x.none"); !ok || len(v) != 0 {
		t.Errorf("Strings(x.none) = %q, %v", v, ok)
	}
	if v, ok := f.Float32s("x.f32s"); !ok || len(v) != 3 || !math.IsInf(float64(v[1]), -1) {
		t.Errorf("Float32s(x.f32s) = %v, %v", v, ok)
	}
	for key, want := range map[string][]int32{
		"x.i32s": {-1, 0, math.MaxInt32},
		"x.i64s": {-5, 7},
		"x.u8s":  {1, 255},
		"x.i8s":  {-128, 127},
		"x.i16s": {-32768},
		"x.u16s": {65535},
	} {
		if v, ok := f.Int32s(key); !ok || !slices.Equal(v, want) {
			t.Errorf("Int32s(%s) = %v, %v; want %v", key, v, ok, want)
		}
	}
	for _, key := range []string{"x.u32s", "x.u64s", "x.f32s", "x.strings", "x.i32"} {
		if v, ok := f.Int32s(key); ok {
			t.Errorf("Int32s(%s) = %v, want no value (out of range or wrong type)", key, v)
		}
	}
	// Wrong types and missing keys.
	for _, c := range []struct {
		key string
		get func(string) bool
	}{
		{"x.u8", func(k string) bool { _, ok := f.String(k); return ok }},
		{"x.f32", func(k string) bool { _, ok := f.Uint(k); return ok }},
		{"x.f32", func(k string) bool { _, ok := f.Int(k); return ok }},
		{"x.strings", func(k string) bool { _, ok := f.Float(k); return ok }},
		{"x.u8", func(k string) bool { _, ok := f.Bool(k); return ok }},
		{"x.u8s", func(k string) bool { _, ok := f.Strings(k); return ok }},
		{"x.f64s", func(k string) bool { _, ok := f.Float32s(k); return ok }},
		{"missing", func(k string) bool { _, ok := f.Uint(k); return ok }},
		{"missing", func(k string) bool { _, ok := f.Strings(k); return ok }},
		{"missing", f.Has},
	} {
		if c.get(c.key) {
			t.Errorf("getter on %s succeeded", c.key)
		}
	}
	if f.Arch() != "llama" || !f.Has("x.none") {
		t.Error("Arch or Has wrong")
	}
	// Returned slices are copies: editing one leaves the file's value alone.
	s, _ := f.Strings("x.strings")
	s[1] = "changed"
	if again, _ := f.Strings("x.strings"); again[1] != "a" {
		t.Error("Strings returned the file's own slice")
	}
}

func TestDataForeignAndClosed(t *testing.T) {
	var calls []string
	wt, _ := randTensor("w", quant.F32, &calls, 4)
	path := filepath.Join(t.TempDir(), "d.gguf")
	if err := Write(path, nil, []WriteTensor{wt}); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	w, _ := f.Tensor("w")
	foreign := *w
	if f.Data(&foreign) != nil {
		t.Error("Data served a tensor that is not the file's")
	}
	w.Offset = 1 << 40 // edits to the exported fields must not reach the mmap
	if len(f.Data(w)) != 16 {
		t.Error("Data followed an edited Offset")
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if f.Data(w) != nil {
		t.Error("Data after Close")
	}
	if err := f.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestWriteErrors(t *testing.T) {
	ok := func() ([]byte, error) { return make([]byte, 16), nil }
	cases := []struct {
		name    string
		kvs     []KV
		tensors []WriteTensor
		want    string
	}{
		{"int has no GGUF type", []KV{{"a", 1}}, nil, `metadata key "a": unsupported value type int`},
		{"nested slice", []KV{{"a", [][]string{}}}, nil, "unsupported value type [][]string"},
		{"nil value", []KV{{"a", nil}}, nil, "unsupported value type <nil>"},
		{"duplicate key", []KV{{"a", true}, {"a", false}}, nil, `duplicate metadata key "a"`},
		{"alignment type", []KV{{alignmentKey, uint64(32)}}, nil, "must be uint32"},
		{"alignment value", []KV{{alignmentKey, uint32(24)}}, nil, "24 is not a power of two"},
		{"duplicate tensor", nil, []WriteTensor{{"t", quant.F32, []uint64{4}, ok}, {"t", quant.F32, []uint64{4}, ok}}, `duplicate tensor name "t"`},
		{"no data", nil, []WriteTensor{{"t", quant.F32, []uint64{4}, nil}}, "no Data function"},
		{"bad shape", nil, []WriteTensor{{"t", quant.Q4_K, []uint64{100}, ok}}, "not a whole number of 256-value blocks"},
		{"unknown type", nil, []WriteTensor{{"t", quant.Type(99), []uint64{4}, ok}}, "unknown type id 99"},
		{"short data", nil, []WriteTensor{{"t", quant.F32, []uint64{5}, ok}}, `tensor "t": Data returned 16 bytes, want 20`},
		{"data error", nil, []WriteTensor{{"t", quant.F32, []uint64{4}, func() ([]byte, error) { return nil, errors.New("boom") }}}, `tensor "t": boom`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "bad.gguf")
			err := Write(path, c.kvs, c.tensors)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "gguf: write ") {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
			if _, serr := os.Stat(path); !errors.Is(serr, os.ErrNotExist) {
				t.Errorf("failed Write left %s behind (%v)", path, serr)
			}
		})
	}
}

// TestWriteMatchesBuilder checks Write against the independent byte-level
// builder of the reader tests: the same content must give the same bytes
// (Write also pads the last tensor, the builder does not).
func TestWriteMatchesBuilder(t *testing.T) {
	s := validSpec()
	built, _ := s.build()
	kvs := []KV{
		{"general.architecture", "llama"},
		{"llama.embedding_length", uint32(64)},
		{"tokenizer.ggml.tokens", []string{"a", "bc", "def"}},
		{"tokenizer.ggml.scores", []float32{0.5, -1, 2}},
		{"general.name", "tiny test"},
	}
	var ts []WriteTensor
	for i, st := range s.tensors {
		end := uint64(len(s.data))
		if i+1 < len(s.tensors) {
			end = s.tensors[i+1].off
		}
		data := s.data[st.off:end]
		ts = append(ts, WriteTensor{st.name, quant.Type(st.typ), st.shape, func() ([]byte, error) { return data, nil }})
	}
	path := filepath.Join(t.TempDir(), "w.gguf")
	if err := Write(path, kvs, ts); err != nil {
		t.Fatal(err)
	}
	written, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(written) != alignUpInt(len(built), 32) || string(written[:len(built)]) != string(built) {
		t.Fatalf("Write produced %d bytes, builder %d; first difference at %d", len(written), len(built), firstDiff(written, built))
	}
	if strings.Trim(string(written[len(built):]), "\x00") != "" {
		t.Error("padding after the last tensor is not zero")
	}
}

func alignUpInt(n, a int) int { return (n + a - 1) / a * a }

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
