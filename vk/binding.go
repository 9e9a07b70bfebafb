package vk

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Span is the number of bytes the binding exposes to a shader.
func (b Binding) Span() int64 {
	if b.Size != 0 {
		return b.Size
	}
	return b.Buf.Size() - b.Off
}

// Check reports, as an error naming what, whether the binding exposes at
// least n bytes inside its buffer from a 4-byte boundary: every shader
// indexes its buffers in 32-bit words.
func (b Binding) Check(what string, n int64) error {
	if b.Buf == nil {
		return fmt.Errorf("%s: no buffer", what)
	}
	if b.Off < 0 || b.Off%4 != 0 || b.Size < 0 {
		return fmt.Errorf("%s: binding offset %d / size %d (offsets are whole 32-bit words)", what, b.Off, b.Size)
	}
	if s := b.Span(); s < n || b.Off+s > b.Buf.Size() {
		return fmt.Errorf("%s: binding of %d bytes at %d in a %d-byte buffer, needs %d", what, s, b.Off, b.Buf.Size(), n)
	}
	return nil
}

// Push encodes push constants: uint32 as is, float32 by its bits. Any other
// type is a programming error and panics.
func Push(vals ...any) []byte {
	b := make([]byte, 0, 4*len(vals))
	for _, v := range vals {
		switch v := v.(type) {
		case uint32:
			b = binary.LittleEndian.AppendUint32(b, v)
		case float32:
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
		default:
			panic(fmt.Sprintf("vk: push constant of type %T", v))
		}
	}
	return b
}
