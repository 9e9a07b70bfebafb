// Package quant holds the GGML tensor block formats: their sizes, dequantizers,
// reference dot products and quantizers. One file per format.
package quant

import (
	"fmt"
	"math"
	"strings"
)

// Type is a GGML tensor type id as stored in GGUF files.
type Type uint32

// GGML type ids (ggml.h). Only the ones listed in Supported have kernels;
// the rest are known so that a file holding them is decoded and then
// rejected with a clear "unsupported tensor type" error.
const (
	F32     Type = 0
	F16     Type = 1
	Q4_0    Type = 2
	Q4_1    Type = 3
	Q5_0    Type = 6
	Q5_1    Type = 7
	Q8_0    Type = 8
	Q8_1    Type = 9
	Q2_K    Type = 10
	Q3_K    Type = 11
	Q4_K    Type = 12
	Q5_K    Type = 13
	Q6_K    Type = 14
	Q8_K    Type = 15
	IQ2_XXS Type = 16
	IQ2_XS  Type = 17
	IQ3_XXS Type = 18
	IQ1_S   Type = 19
	IQ4_NL  Type = 20
	IQ3_S   Type = 21
	IQ2_S   Type = 22
	IQ4_XS  Type = 23
	I8      Type = 24
	I16     Type = 25
	I32     Type = 26
	I64     Type = 27
	F64     Type = 28
	IQ1_M   Type = 29
	BF16    Type = 30
	TQ1_0   Type = 34
	TQ2_0   Type = 35
	MXFP4   Type = 39
)

type typeInfo struct {
	name       string
	blockSize  int // values per block
	blockBytes int // bytes per block
	supported  bool
}

// types is indexed by id (an array, not a map: Dot looks sizes up once per
// row on the CPU matmul's hot path). Ids without an entry have an empty name.
var types = [...]typeInfo{
	F32:     {"F32", 1, 4, true},
	F16:     {"F16", 1, 2, true},
	Q4_0:    {"Q4_0", 32, 18, true},
	Q4_1:    {"Q4_1", 32, 20, false},
	Q5_0:    {"Q5_0", 32, 22, false},
	Q5_1:    {"Q5_1", 32, 24, false},
	Q8_0:    {"Q8_0", 32, 34, true},
	Q8_1:    {"Q8_1", 32, 36, false},
	Q2_K:    {"Q2_K", 256, 84, false},
	Q3_K:    {"Q3_K", 256, 110, false},
	Q4_K:    {"Q4_K", 256, 144, true},
	Q5_K:    {"Q5_K", 256, 176, true},
	Q6_K:    {"Q6_K", 256, 210, true},
	Q8_K:    {"Q8_K", 256, 292, false},
	IQ2_XXS: {"IQ2_XXS", 256, 66, false},
	IQ2_XS:  {"IQ2_XS", 256, 74, false},
	IQ3_XXS: {"IQ3_XXS", 256, 98, false},
	IQ1_S:   {"IQ1_S", 256, 50, false},
	IQ4_NL:  {"IQ4_NL", 32, 18, false},
	IQ3_S:   {"IQ3_S", 256, 110, false},
	IQ2_S:   {"IQ2_S", 256, 82, false},
	IQ4_XS:  {"IQ4_XS", 256, 136, false},
	I8:      {"I8", 1, 1, false},
	I16:     {"I16", 1, 2, false},
	I32:     {"I32", 1, 4, false},
	I64:     {"I64", 1, 8, false},
	F64:     {"F64", 1, 8, false},
	IQ1_M:   {"IQ1_M", 256, 56, false},
	BF16:    {"BF16", 1, 2, true},
	TQ1_0:   {"TQ1_0", 256, 54, false},
	TQ2_0:   {"TQ2_0", 256, 66, false},
	MXFP4:   {"MXFP4", 32, 17, false},
}

// info returns the table entry of t; ok is false for an unknown id.
func (t Type) info() (ti typeInfo, ok bool) {
	if uint64(t) < uint64(len(types)) && types[t].name != "" {
		return types[t], true
	}
	return typeInfo{}, false
}

// Known reports whether t is a GGML type id this package knows the layout of.
func (t Type) Known() bool { _, ok := t.info(); return ok }

// Supported reports whether vkinfer can compute with tensors of type t.
func (t Type) Supported() bool { ti, _ := t.info(); return ti.supported }

// String returns the GGML name, e.g. "Q4_K", or "type(N)" for an unknown id.
func (t Type) String() string {
	if ti, ok := t.info(); ok {
		return ti.name
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// BlockSize is the number of values in one block (1 for plain float types).
// It is 0 for an unknown type.
func (t Type) BlockSize() int { ti, _ := t.info(); return ti.blockSize }

// BlockBytes is the size in bytes of one block. It is 0 for an unknown type.
func (t Type) BlockBytes() int { ti, _ := t.info(); return ti.blockBytes }

// RowBytes returns the bytes of a row of n values, or an error when n is not
// a whole number of blocks or the type is unknown.
func (t Type) RowBytes(n int) (int, error) {
	ti, ok := t.info()
	if !ok {
		return 0, fmt.Errorf("unknown tensor type id %d", uint32(t))
	}
	if n < 0 || n%ti.blockSize != 0 {
		return 0, fmt.Errorf("%s row of %d values is not a whole number of %d-value blocks", ti.name, n, ti.blockSize)
	}
	if n/ti.blockSize > math.MaxInt/ti.blockBytes {
		return 0, fmt.Errorf("%s row of %d values: byte size overflows int", ti.name, n)
	}
	return n / ti.blockSize * ti.blockBytes, nil
}

// ParseType maps a GGML type name ("q4_k", "F16", …) to its id.
func ParseType(name string) (Type, bool) {
	for t, ti := range types {
		if ti.name != "" && strings.EqualFold(ti.name, name) {
			return Type(t), true
		}
	}
	return 0, false
}
