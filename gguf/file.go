// Package gguf reads and writes GGUF v3 files. Open validates the whole
// header before trusting any of it (see docs/GGUF.md), decodes metadata and
// the tensor table with ollama's fs/ggml, and serves tensor bytes straight
// from a read-only memory map. Write streams a new file one tensor at a time.
package gguf

import (
	"bytes"
	"fmt"
	"os"
	"slices"

	"github.com/ollama/ollama/fs/ggml"
	"github.com/vkinfer/vkinfer/quant"
)

// File is an opened GGUF file. Slices returned by Data alias the memory map
// and are valid until Close.
type File struct {
	path    string
	data    []byte // the memory map; nil after Close
	size    int64
	meta    map[string]any // key → value, see values.go for the Go types
	keys    []string       // sorted
	tensors []*Tensor
	spans   []tensorSpan   // validated data range of tensors[i], kept private so Data ignores edits to a Tensor
	byName  map[string]int // name → index in tensors
}

// Open maps and validates the GGUF file at path.
func Open(path string) (*File, error) {
	fd, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	// The mapping stays valid after the descriptor is closed.
	defer fd.Close()
	b, err := mapFile(fd)
	if err != nil {
		return nil, fmt.Errorf("gguf: %s: %w", path, err)
	}
	f, err := parse(b)
	if err != nil {
		unmap(b)
		return nil, fmt.Errorf("gguf: %w", err)
	}
	f.path = path
	return f, nil
}

// parse builds a File over b, the complete file contents.
func parse(b []byte) (*File, error) {
	l, err := scan(b)
	if err != nil {
		return nil, err
	}
	// The scan guarantees every count, length and type Decode will read is
	// sane, so Decode cannot allocate beyond a small multiple of the file.
	g, err := ggml.Decode(bytes.NewReader(b), -1)
	if err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	f := &File{data: b, size: int64(len(b)), spans: l.tensors}
	if f.meta, err = metadata(l.keys, g.KV(), b); err != nil {
		return nil, err
	}
	for k := range f.meta {
		f.keys = append(f.keys, k)
	}
	slices.Sort(f.keys)
	// Data serves the scan's ranges, so the table Decode reports must agree
	// with them exactly; a different fs/ggml version could disagree.
	ts := g.Tensors()
	if len(ts.Items()) != len(l.tensors) {
		return nil, fmt.Errorf("decode: %d tensors, the scan found %d", len(ts.Items()), len(l.tensors))
	}
	f.byName = make(map[string]int, len(l.tensors))
	for i, t := range ts.Items() {
		sp := l.tensors[i]
		if t.Name != sp.name || ts.Offset+t.Offset != sp.start {
			return nil, fmt.Errorf("decode: tensor %d is %s at %d, the scan found %s at %d",
				i, quote(t.Name), ts.Offset+t.Offset, quote(sp.name), sp.start)
		}
		f.tensors = append(f.tensors, &Tensor{
			Name:   t.Name,
			Type:   quant.Type(t.Kind),
			Shape:  t.Shape,
			Offset: ts.Offset + t.Offset,
			Bytes:  sp.end - sp.start,
		})
		f.byName[t.Name] = i
	}
	return f, nil
}

// Close unmaps the file. Slices from Data must not be used afterwards.
func (f *File) Close() error {
	b := f.data
	f.data = nil
	if err := unmap(b); err != nil {
		return fmt.Errorf("gguf: %s: munmap: %w", f.path, err)
	}
	return nil
}

func (f *File) Path() string { return f.path }

// Size is the file size in bytes.
func (f *File) Size() int64 { return f.size }

// Version is the GGUF version; Open accepts only 3.
func (f *File) Version() uint32 { return version }

// Arch is general.architecture, or "" when absent.
func (f *File) Arch() string {
	s, _ := f.String("general.architecture")
	return s
}

// Tensors returns the tensors in file order.
func (f *File) Tensors() []*Tensor { return slices.Clone(f.tensors) }

// Tensor looks a tensor up by name.
func (f *File) Tensor(name string) (*Tensor, bool) {
	i, ok := f.byName[name]
	if !ok {
		return nil, false
	}
	return f.tensors[i], true
}

// Data returns the bytes of t, read-only, straight from the memory map
// (len == t.Bytes). It is nil when t is not a tensor of f or f is closed.
func (f *File) Data(t *Tensor) []byte {
	i, ok := f.byName[t.Name]
	if !ok || f.tensors[i] != t || f.data == nil {
		return nil
	}
	sp := f.spans[i]
	return f.data[sp.start:sp.end:sp.end]
}
