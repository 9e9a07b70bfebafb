package gguf

import (
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/vkinfer/vkinfer/quant"
)

// TestHeaderMatchesFile: Header gives what Open gives for the file Write
// writes from the same input (metadata, tensor table, size), with no data.
func TestHeaderMatchesFile(t *testing.T) {
	type name string // a named type, which Open returns as string
	for _, align := range []uint32{0, 64} {
		kvs := append(allKVs(), KV{"x.named", name("n")}, KV{"x.nameds", []name{"a", "b"}})
		if align != 0 {
			kvs = append(kvs, KV{alignmentKey, align})
		}
		var calls []string
		var ts []WriteTensor
		for _, c := range []struct {
			name  string
			typ   quant.Type
			shape []uint64
		}{
			{"a.f32", quant.F32, []uint64{7, 3}},
			{"b.q4k", quant.Q4_K, []uint64{512, 2}},
			{"c.q6k", quant.Q6_K, []uint64{256, 1, 1}},
		} {
			wt, _ := randTensor(c.name, c.typ, &calls, c.shape...)
			ts = append(ts, wt)
		}
		path := filepath.Join(t.TempDir(), "h.gguf")
		if err := Write(path, kvs, ts); err != nil {
			t.Fatal(err)
		}
		want, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer want.Close()
		calls = nil
		for i := range ts {
			ts[i].Data = nil
		}
		got, err := Header("spec", kvs, ts)
		if err != nil {
			t.Fatal(err)
		}
		if len(calls) != 0 {
			t.Errorf("Header produced tensor data: %v", calls)
		}
		if got.Path() != "spec" || got.Size() != want.Size() {
			t.Errorf("align %d: path %q size %d, want spec and %d", align, got.Path(), got.Size(), want.Size())
		}
		if !slices.Equal(got.Keys(), want.Keys()) {
			t.Errorf("align %d: keys %v, want %v", align, got.Keys(), want.Keys())
		}
		for _, k := range want.Keys() {
			if !reflect.DeepEqual(got.meta[k], want.meta[k]) {
				t.Errorf("align %d: %s = %#v, want %#v", align, k, got.meta[k], want.meta[k])
			}
		}
		for i, wt := range want.Tensors() {
			gt, ok := got.Tensor(wt.Name)
			if !ok || !reflect.DeepEqual(*gt, *wt) || got.Tensors()[i] != gt {
				t.Errorf("align %d: tensor %d is %+v, want %+v", align, i, gt, wt)
			}
			if got.Data(gt) != nil {
				t.Errorf("align %d: tensor %s has data", align, wt.Name)
			}
		}
		if err := got.Close(); err != nil {
			t.Error(err)
		}
	}
}

// TestHeaderErrors: Header refuses what Write refuses.
func TestHeaderErrors(t *testing.T) {
	for _, c := range []struct {
		kvs     []KV
		tensors []WriteTensor
		want    string
	}{
		{[]KV{{"a", 1}}, nil, "unsupported value type"},
		{[]KV{{"a", "x"}, {"a", "y"}}, nil, "duplicate metadata key"},
		{nil, []WriteTensor{{Name: "t", Type: quant.Q4_K, Shape: []uint64{100}}}, "t"},
		{nil, []WriteTensor{{Name: "t", Type: quant.F32, Shape: []uint64{1}}, {Name: "t", Type: quant.F32, Shape: []uint64{1}}}, "duplicate tensor"},
	} {
		_, err := Header("h", c.kvs, c.tensors)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v %v: error %v, want one naming %q", c.kvs, c.tensors, err, c.want)
		}
	}
}
