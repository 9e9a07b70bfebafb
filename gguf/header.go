package gguf

import (
	"bufio"
	"fmt"
	"io"
	"reflect"
	"slices"
)

// Header returns the File that Write(path, kvs, tensors) would produce,
// without writing it or producing any tensor data: its metadata, its
// tensor table (offsets and sizes as the file would hold them) and its
// size, for code that reads only a model's shapes. Data returns nil for
// every tensor, and the tensors need no Data function. The input is
// checked as Write checks it; name is what Path reports.
func Header(name string, kvs []KV, tensors []WriteTensor) (*File, error) {
	align, sizes, err := checkWrite(kvs, tensors, false)
	if err != nil {
		return nil, fmt.Errorf("gguf: header %s: %w", name, err)
	}
	// The header's length, which places the data section, is what Write
	// would write before it.
	e := &encoder{w: bufio.NewWriter(io.Discard)}
	writeHeader(e, kvs, tensors, sizes, align)
	if e.err != nil {
		return nil, fmt.Errorf("gguf: header %s: %w", name, e.err)
	}
	f := &File{path: name, meta: make(map[string]any, len(kvs)), byName: make(map[string]int, len(tensors))}
	for _, kv := range kvs {
		f.meta[kv.Key] = decoded(kv.Value)
		f.keys = append(f.keys, kv.Key)
	}
	slices.Sort(f.keys)
	off := e.n
	for i, t := range tensors {
		f.tensors = append(f.tensors, &Tensor{Name: t.Name, Type: t.Type, Shape: slices.Clone(t.Shape), Offset: off, Bytes: sizes[i]})
		f.byName[t.Name] = i
		off = alignUp(off+sizes[i], align)
	}
	f.size = int64(off)
	return f, nil
}

// plainTypes are the Go types Open decodes metadata values to, by kind.
var plainTypes = func() map[reflect.Kind]reflect.Type {
	m := map[reflect.Kind]reflect.Type{}
	for _, v := range []any{uint8(0), int8(0), uint16(0), int16(0), uint32(0), int32(0), uint64(0), int64(0),
		float32(0), float64(0), false, ""} {
		m[reflect.TypeOf(v).Kind()] = reflect.TypeOf(v)
	}
	return m
}()

// decoded is a metadata value, which checkWrite accepted, as Open would
// return it after a round trip through a file: of its kind's plain type
// (a named string type becomes string), slices copied.
func decoded(v any) any {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Slice {
		return rv.Convert(plainTypes[rv.Kind()]).Interface()
	}
	out := reflect.MakeSlice(reflect.SliceOf(plainTypes[rv.Type().Elem().Kind()]), rv.Len(), rv.Len())
	for i := range rv.Len() {
		out.Index(i).Set(rv.Index(i).Convert(out.Type().Elem()))
	}
	return out.Interface()
}
