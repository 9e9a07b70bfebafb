package gguf

import (
	"bufio"
	"fmt"
	"os"

	"github.com/vkinfer/vkinfer/quant"
)

// KV is one metadata entry for Write. Value is a string, bool, fixed-size
// integer or float, or a slice of one of those; it is written with the
// matching GGUF type (int and uint have no fixed size and are refused).
type KV struct {
	Key   string
	Value any
}

// WriteTensor is one tensor for Write.
type WriteTensor struct {
	Name  string
	Type  quant.Type
	Shape []uint64
	Data  func() ([]byte, error) // called once, in order, while writing the data section; must return exactly the tensor's bytes
}

// Write writes a GGUF v3 file: keys in the given order, tensors in the given
// order, each tensor's data aligned to general.alignment (32 unless given as
// a uint32 entry). Only one tensor's bytes are held at a time. On error the
// partial file is removed.
func Write(path string, kvs []KV, tensors []WriteTensor) (err error) {
	align, sizes, err := checkWrite(kvs, tensors, true)
	if err != nil {
		return fmt.Errorf("gguf: write %s: %w", path, err)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("gguf: write: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(path)
			err = fmt.Errorf("gguf: write %s: %w", path, err)
		}
	}()
	e := &encoder{w: bufio.NewWriterSize(f, 1<<20)}
	writeHeader(e, kvs, tensors, sizes, align)
	for i, t := range tensors {
		b, err := t.Data()
		if err != nil {
			return fmt.Errorf("tensor %s: %w", quote(t.Name), err)
		}
		if uint64(len(b)) != sizes[i] {
			return fmt.Errorf("tensor %s: Data returned %d bytes, want %d", quote(t.Name), len(b), sizes[i])
		}
		e.Write(b)
		e.pad(align)
	}
	if e.err != nil {
		return e.err
	}
	if err := e.w.Flush(); err != nil {
		return err
	}
	return f.Close()
}

// writeHeader writes everything before the first tensor's data: the
// magic, the metadata, the tensor table (offsets from the sizes, each
// tensor aligned) and the padding up to the data section.
func writeHeader(e *encoder, kvs []KV, tensors []WriteTensor, sizes []uint64, align uint64) {
	e.Write([]byte("GGUF"))
	e.u32(version)
	e.u64(uint64(len(tensors)))
	e.u64(uint64(len(kvs)))
	for _, kv := range kvs {
		e.str(kv.Key)
		t, elem, _ := valueTypeOf(kv.Value)
		e.value(kv.Value, t, elem)
	}
	var off uint64
	for i, t := range tensors {
		e.str(t.Name)
		e.u32(uint32(len(t.Shape)))
		for _, d := range t.Shape {
			e.u64(d)
		}
		e.u32(uint32(t.Type))
		e.u64(off)
		off = alignUp(off+sizes[i], align)
	}
	e.pad(align)
}

// checkWrite validates the input before anything is written, with the
// reader's rules, and returns the alignment and each tensor's size. With
// needData, every tensor must have its Data function.
func checkWrite(kvs []KV, tensors []WriteTensor, needData bool) (uint64, []uint64, error) {
	align := uint64(defaultAlignment)
	keys := map[string]bool{}
	for _, kv := range kvs {
		if keys[kv.Key] {
			return 0, nil, fmt.Errorf("duplicate metadata key %s", quote(kv.Key))
		}
		keys[kv.Key] = true
		if _, _, ok := valueTypeOf(kv.Value); !ok {
			return 0, nil, fmt.Errorf("metadata key %s: unsupported value type %T", quote(kv.Key), kv.Value)
		}
		if kv.Key == alignmentKey {
			a, ok := kv.Value.(uint32)
			if !ok {
				return 0, nil, fmt.Errorf("metadata key %q has type %T (must be uint32)", alignmentKey, kv.Value)
			}
			if err := checkAlignment(a); err != nil {
				return 0, nil, err
			}
			align = uint64(a)
		}
	}
	names := map[string]bool{}
	sizes := make([]uint64, len(tensors))
	for i, t := range tensors {
		if names[t.Name] {
			return 0, nil, fmt.Errorf("duplicate tensor name %s", quote(t.Name))
		}
		names[t.Name] = true
		if needData && t.Data == nil {
			return 0, nil, fmt.Errorf("tensor %s: no Data function", quote(t.Name))
		}
		n, err := tensorBytes(t.Type, t.Shape)
		if err != nil {
			return 0, nil, fmt.Errorf("tensor %s: %w", quote(t.Name), err)
		}
		sizes[i] = n
	}
	return align, sizes, nil
}
