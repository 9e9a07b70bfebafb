package gguf

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"reflect"

	"github.com/ollama/ollama/fs/ggml"
)

// inventedKey is the one key ggml.Decode writes into its KV map itself (the
// sum of tensor elements), overwriting the file's own entry if there is one.
const inventedKey = "general.parameter_count"

// metadata converts Decode's KV map into plain Go values, keeping only the
// keys the scan saw in the file. Scalars stay as Decode returns them (uint8 …
// float64, bool, string); arrays become plain slices ([]uint8 … []string).
func metadata(keys []keyInfo, kv ggml.KV, b []byte) (map[string]any, error) {
	meta := make(map[string]any, len(keys))
	for _, k := range keys {
		v := kv[k.name]
		if k.name == inventedKey {
			var err error
			if v, err = decodeEntry(b[k.raw.start:k.raw.end]); err != nil {
				return nil, fmt.Errorf("decode metadata key %s: %w", quote(k.name), err)
			}
		}
		nv, err := plain(v, k)
		if err != nil {
			return nil, fmt.Errorf("decode metadata key %s: %w", quote(k.name), err)
		}
		meta[k.name] = nv
	}
	return meta, nil
}

// decodeEntry decodes one entry's type id and value bytes by wrapping them in
// a one-key GGUF under a key Decode leaves alone.
func decodeEntry(raw []byte) (any, error) {
	b := binary.LittleEndian.AppendUint32([]byte("GGUF"), version)
	b = binary.LittleEndian.AppendUint64(b, 0) // tensors
	b = binary.LittleEndian.AppendUint64(b, 1) // keys
	b = binary.LittleEndian.AppendUint64(b, 1) // key length
	b = append(append(b, 'v'), raw...)
	g, err := ggml.Decode(bytes.NewReader(b), -1)
	if err != nil {
		return nil, err
	}
	return g.KV()["v"], nil
}

// plain checks that Decode produced the type the scan read and unwraps
// arrays. Decode keeps arrays in an unexported generic struct whose element
// slice is reachable only through reflection; reading scalars from an
// unexported field is allowed, only Interface() is not.
func plain(v any, k keyInfo) (any, error) {
	rv := reflect.ValueOf(v)
	if k.typ != typeArray {
		if !rv.IsValid() || rv.Kind() != k.typ.kind() {
			return nil, fmt.Errorf("decoder returned %T for a %s", v, k.typ)
		}
		return v, nil
	}
	var vals reflect.Value
	if rv.Kind() == reflect.Pointer && rv.Elem().Kind() == reflect.Struct {
		vals = rv.Elem().FieldByName("values")
	}
	if !vals.IsValid() || vals.Kind() != reflect.Slice || vals.Type().Elem().Kind() != k.elem.kind() {
		return nil, fmt.Errorf("decoder returned %T for an array of %s", v, k.elem)
	}
	switch k.elem {
	case typeUint8:
		return collect(vals, func(e reflect.Value) uint8 { return uint8(e.Uint()) }), nil
	case typeInt8:
		return collect(vals, func(e reflect.Value) int8 { return int8(e.Int()) }), nil
	case typeUint16:
		return collect(vals, func(e reflect.Value) uint16 { return uint16(e.Uint()) }), nil
	case typeInt16:
		return collect(vals, func(e reflect.Value) int16 { return int16(e.Int()) }), nil
	case typeUint32:
		return collect(vals, func(e reflect.Value) uint32 { return uint32(e.Uint()) }), nil
	case typeInt32:
		return collect(vals, func(e reflect.Value) int32 { return int32(e.Int()) }), nil
	case typeUint64:
		return collect(vals, reflect.Value.Uint), nil
	case typeInt64:
		return collect(vals, reflect.Value.Int), nil
	case typeFloat32:
		return collect(vals, func(e reflect.Value) float32 { return float32(e.Float()) }), nil
	case typeFloat64:
		return collect(vals, reflect.Value.Float), nil
	case typeBool:
		return collect(vals, reflect.Value.Bool), nil
	default: // typeString; the scan admits no other element type
		return collect(vals, reflect.Value.String), nil
	}
}

func collect[T any](vals reflect.Value, get func(reflect.Value) T) []T {
	out := make([]T, vals.Len())
	for i := range out {
		out[i] = get(vals.Index(i))
	}
	return out
}
