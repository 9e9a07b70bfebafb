package gguf

import (
	"fmt"
	"math/bits"

	"github.com/vkinfer/vkinfer/quant"
)

// maxDims is GGML_MAX_DIMS: ggml tensors have at most four dimensions.
const maxDims = 4

// Tensor describes one tensor of an opened file. Its fields are validated by
// Open; the bytes are obtained with File.Data.
type Tensor struct {
	Name   string
	Type   quant.Type
	Shape  []uint64 // GGML order: Shape[0] (ne0) is the contiguous dimension (columns); Shape[1] rows …
	Offset uint64   // absolute offset in the file
	Bytes  uint64
}

// Elements is the number of values in the tensor (the product of Shape).
func (t *Tensor) Elements() uint64 {
	n := uint64(1)
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// tensorBytes checks that a tensor of type typ and shape can exist and
// returns its size in bytes. The reader and the writer share it so that
// nothing is written that would not be read back.
func tensorBytes(typ quant.Type, shape []uint64) (uint64, error) {
	if !typ.Known() {
		return 0, fmt.Errorf("unknown type id %d", uint32(typ))
	}
	if len(shape) < 1 || len(shape) > maxDims {
		return 0, fmt.Errorf("%d dimensions (must be 1 to %d)", len(shape), maxDims)
	}
	elems := uint64(1)
	for i, d := range shape {
		if d == 0 {
			return 0, fmt.Errorf("dimension %d of shape %v is zero", i, shape)
		}
		hi, lo := bits.Mul64(elems, d)
		if hi != 0 {
			return 0, fmt.Errorf("shape %v has more than 2^64 elements", shape)
		}
		elems = lo
	}
	bs, bb := uint64(typ.BlockSize()), uint64(typ.BlockBytes())
	if shape[0]%bs != 0 {
		return 0, fmt.Errorf("%s row of %d values is not a whole number of %d-value blocks", typ, shape[0], bs)
	}
	hi, n := bits.Mul64(elems/bs, bb)
	if hi != 0 {
		return 0, fmt.Errorf("%s shape %v needs more than 2^64 bytes", typ, shape)
	}
	return n, nil
}

// quote formats a name from the file for an error message: escaped so the
// message stays on one line, and shortened so a hostile megabyte-long name
// does not become a megabyte-long error.
func quote(name string) string {
	const max = 80
	if len(name) > max {
		return fmt.Sprintf("%q…(%d bytes)", name[:max], len(name))
	}
	return fmt.Sprintf("%q", name)
}
