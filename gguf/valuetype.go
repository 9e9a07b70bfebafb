package gguf

import (
	"fmt"
	"reflect"
)

// valueType is a GGUF metadata value type id (gguf.h: enum gguf_type).
type valueType uint32

const (
	typeUint8 valueType = iota
	typeInt8
	typeUint16
	typeInt16
	typeUint32
	typeInt32
	typeFloat32
	typeBool
	typeString
	typeArray
	typeUint64
	typeInt64
	typeFloat64
)

type valueTypeInfo struct {
	name string
	size uint64       // encoded bytes of one value; 0 for string and array
	kind reflect.Kind // the Go kind a value of this type decodes to
}

var valueTypes = map[valueType]valueTypeInfo{
	typeUint8:   {"uint8", 1, reflect.Uint8},
	typeInt8:    {"int8", 1, reflect.Int8},
	typeUint16:  {"uint16", 2, reflect.Uint16},
	typeInt16:   {"int16", 2, reflect.Int16},
	typeUint32:  {"uint32", 4, reflect.Uint32},
	typeInt32:   {"int32", 4, reflect.Int32},
	typeFloat32: {"float32", 4, reflect.Float32},
	typeBool:    {"bool", 1, reflect.Bool},
	typeString:  {"string", 0, reflect.String},
	typeArray:   {"array", 0, reflect.Slice},
	typeUint64:  {"uint64", 8, reflect.Uint64},
	typeInt64:   {"int64", 8, reflect.Int64},
	typeFloat64: {"float64", 8, reflect.Float64},
}

func (t valueType) known() bool  { _, ok := valueTypes[t]; return ok }
func (t valueType) size() uint64 { return valueTypes[t].size }

func (t valueType) kind() reflect.Kind { return valueTypes[t].kind }

func (t valueType) String() string {
	if ti, ok := valueTypes[t]; ok {
		return ti.name
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// typeOfKind maps a Go kind to the GGUF type that holds it exactly. Platform
// sized kinds (int, uint) and everything else have none.
func typeOfKind(k reflect.Kind) (valueType, bool) {
	for t, ti := range valueTypes {
		if ti.kind == k && t != typeArray {
			return t, true
		}
	}
	return 0, false
}
