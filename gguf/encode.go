package gguf

import (
	"bufio"
	"encoding/binary"
	"reflect"
)

// encoder writes little-endian GGUF encodings, counting bytes for padding
// and keeping the first error so the caller checks once at the end.
type encoder struct {
	w       *bufio.Writer
	n       uint64
	err     error
	scratch [8]byte
}

func (e *encoder) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.n += uint64(n)
	e.err = err
	return n, err
}

func (e *encoder) u32(v uint32) { e.Write(binary.LittleEndian.AppendUint32(e.scratch[:0], v)) }
func (e *encoder) u64(v uint64) { e.Write(binary.LittleEndian.AppendUint64(e.scratch[:0], v)) }

func (e *encoder) str(s string) {
	e.u64(uint64(len(s)))
	e.Write([]byte(s))
}

// fixed writes a fixed-size value or slice of them.
func (e *encoder) fixed(v any) {
	if err := binary.Write(e, binary.LittleEndian, v); err != nil && e.err == nil {
		e.err = err
	}
}

// pad writes zeros up to the next multiple of align.
func (e *encoder) pad(align uint64) {
	e.Write(make([]byte, alignUp(e.n, align)-e.n))
}

// valueTypeOf returns the GGUF type that holds v exactly (and the element
// type of a slice), judged by kind so named types work too.
func valueTypeOf(v any) (t, elem valueType, ok bool) {
	rt := reflect.TypeOf(v)
	if rt == nil {
		return 0, 0, false
	}
	if rt.Kind() == reflect.Slice {
		elem, ok = typeOfKind(rt.Elem().Kind())
		return typeArray, elem, ok
	}
	t, ok = typeOfKind(rt.Kind())
	return t, 0, ok
}

// value writes the type id and value of v, whose types valueTypeOf accepted.
func (e *encoder) value(v any, t, elem valueType) {
	e.u32(uint32(t))
	rv := reflect.ValueOf(v)
	switch {
	case t == typeString:
		e.str(rv.String())
	case t != typeArray:
		e.fixed(v)
	case elem == typeString:
		e.u32(uint32(elem))
		e.u64(uint64(rv.Len()))
		for i := range rv.Len() {
			e.str(rv.Index(i).String())
		}
	default:
		e.u32(uint32(elem))
		e.u64(uint64(rv.Len()))
		e.fixed(v)
	}
}
