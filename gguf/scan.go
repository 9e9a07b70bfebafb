package gguf

import (
	"encoding/binary"
	"fmt"
	"math/bits"

	"github.com/vkinfer/vkinfer/quant"
)

const (
	// version is the only GGUF version read or written: v1 used 32-bit
	// counts and NUL-terminated strings, v2 is superseded, and nothing we
	// load is written in either.
	version = 3
	// defaultAlignment applies when general.alignment is absent.
	defaultAlignment = 32
	alignmentKey     = "general.alignment"

	// The smallest possible encodings of a metadata entry (empty key, type,
	// one-byte value) and of a tensor info (empty name, n_dims, one
	// dimension, type, offset). A declared count is rejected when even this
	// many bytes per item do not fit in what is left of the file, so no
	// count read from the file ever sizes an allocation on its own.
	minKVBytes     = 8 + 4 + 1
	minTensorBytes = 8 + 4 + 8 + 4 + 8
)

// keyInfo is what the pre-scan learns about one metadata entry.
type keyInfo struct {
	name      string
	typ, elem valueType // elem is the element type of an array
	raw       span      // the type id and value bytes, for re-decoding one entry
}

// span is a byte range [start, end) of the file.
type span struct{ start, end uint64 }

// layout is the validated structure of a GGUF file: everything Open needs to
// trust the file before handing it to ggml.Decode.
type layout struct {
	keys      []keyInfo
	align     uint64
	dataStart uint64
	tensors   []tensorSpan // in file order
}

// scanner walks the file bytes; ctx names what is being read so that a
// truncation error says where it happened.
type scanner struct {
	b   []byte
	off uint64
	ctx string
}

func (s *scanner) left() uint64 { return uint64(len(s.b)) - s.off }

func (s *scanner) take(n uint64, what string) ([]byte, error) {
	if n > s.left() {
		return nil, fmt.Errorf("truncated file: %s%s needs %d bytes, %d left", s.ctx, what, n, s.left())
	}
	p := s.b[s.off : s.off+n]
	s.off += n
	return p, nil
}

func (s *scanner) u32(what string) (uint32, error) {
	p, err := s.take(4, what)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(p), nil
}

func (s *scanner) u64(what string) (uint64, error) {
	p, err := s.take(8, what)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(p), nil
}

// str reads a GGUF string: a uint64 length and that many bytes.
func (s *scanner) str(what string) ([]byte, error) {
	n, err := s.u64(what + " length")
	if err != nil {
		return nil, err
	}
	return s.take(n, what)
}

// scan validates the whole header of b (the complete file) without
// allocating anything sized by an unchecked field.
func scan(b []byte) (*layout, error) {
	s := &scanner{b: b, ctx: "header"}
	magic, err := s.take(4, " magic")
	if err != nil {
		return nil, err
	}
	if string(magic) != "GGUF" {
		return nil, fmt.Errorf("not a GGUF file: magic %q (want \"GGUF\")", magic)
	}
	v, err := s.u32(" version")
	if err != nil {
		return nil, err
	}
	if v != version {
		if bits.ReverseBytes32(v) == version {
			return nil, fmt.Errorf("unsupported big-endian GGUF file (only little-endian version %d)", version)
		}
		return nil, fmt.Errorf("unsupported GGUF version %d (only version %d)", v, version)
	}
	nTensors, err := s.u64(" tensor count")
	if err != nil {
		return nil, err
	}
	nKV, err := s.u64(" metadata key count")
	if err != nil {
		return nil, err
	}
	if nKV > s.left()/minKVBytes {
		return nil, fmt.Errorf("truncated file: header declares %d metadata keys, %d bytes left cannot hold them", nKV, s.left())
	}
	l := &layout{align: defaultAlignment}
	seen := map[string]uint64{}
	for i := range nKV {
		k, err := s.keyValue(i)
		if err != nil {
			return nil, err
		}
		if j, dup := seen[k.name]; dup {
			return nil, fmt.Errorf("duplicate metadata key %s (entries %d and %d)", quote(k.name), j, i)
		}
		seen[k.name] = i
		l.keys = append(l.keys, k)
		if k.name == alignmentKey {
			if l.align, err = alignment(k, b); err != nil {
				return nil, err
			}
		}
	}
	if nTensors > s.left()/minTensorBytes {
		return nil, fmt.Errorf("truncated file: header declares %d tensors, %d bytes left cannot hold their infos", nTensors, s.left())
	}
	names := map[string]uint64{}
	var exts []extent
	for i := range nTensors {
		e, err := s.tensorInfo(i, l.align)
		if err != nil {
			return nil, err
		}
		if j, dup := names[e.name]; dup {
			return nil, fmt.Errorf("duplicate tensor name %s (tensors %d and %d)", quote(e.name), j, i)
		}
		names[e.name] = i
		exts = append(exts, e)
	}
	l.dataStart = alignUp(s.off, l.align)
	if l.tensors, err = place(exts, l.dataStart, uint64(len(b))); err != nil {
		return nil, err
	}
	return l, nil
}

// keyValue reads metadata entry i and skips over its value.
func (s *scanner) keyValue(i uint64) (keyInfo, error) {
	s.ctx = fmt.Sprintf("metadata key %d", i)
	name, err := s.str("")
	if err != nil {
		return keyInfo{}, err
	}
	k := keyInfo{name: string(name), raw: span{start: s.off}}
	s.ctx = fmt.Sprintf("metadata key %d (%s)", i, quote(k.name))
	t, err := s.u32(" type")
	if err != nil {
		return keyInfo{}, err
	}
	k.typ = valueType(t)
	switch {
	case k.typ == typeArray:
		if k.elem, err = s.array(); err != nil {
			return keyInfo{}, err
		}
	case k.typ == typeString:
		_, err = s.str(" value")
	case k.typ.known():
		_, err = s.take(k.typ.size(), " value")
	default:
		err = fmt.Errorf("%s: unknown value type %d", s.ctx, t)
	}
	k.raw.end = s.off
	return k, err
}

// array skips an array value and returns its element type. Arrays of arrays
// are rejected: llama.cpp never writes them and ggml.Decode cannot read them.
func (s *scanner) array() (valueType, error) {
	t, err := s.u32(" array element type")
	if err != nil {
		return 0, err
	}
	elem := valueType(t)
	if elem == typeArray {
		return 0, fmt.Errorf("%s: arrays of arrays are not supported", s.ctx)
	}
	if !elem.known() {
		return 0, fmt.Errorf("%s: unknown array element type %d", s.ctx, t)
	}
	n, err := s.u64(" array length")
	if err != nil {
		return 0, err
	}
	if elem == typeString {
		if n > s.left()/8 {
			return 0, fmt.Errorf("truncated file: %s array of %d strings cannot fit in the %d bytes left", s.ctx, n, s.left())
		}
		for range n {
			if _, err := s.str(" array element"); err != nil {
				return 0, err
			}
		}
		return elem, nil
	}
	if n > s.left()/elem.size() {
		return 0, fmt.Errorf("truncated file: %s array of %d %s values cannot fit in the %d bytes left", s.ctx, n, elem, s.left())
	}
	s.off += n * elem.size()
	return elem, nil
}

// extent is a tensor's data as its info declares it: n bytes at off, relative
// to the start of the data section.
type extent struct {
	name   string
	off, n uint64
}

// tensorInfo reads and checks tensor info i.
func (s *scanner) tensorInfo(i, align uint64) (extent, error) {
	s.ctx = fmt.Sprintf("tensor %d", i)
	nb, err := s.str(" name")
	if err != nil {
		return extent{}, err
	}
	name := string(nb)
	s.ctx = fmt.Sprintf("tensor %s", quote(name))
	nd, err := s.u32(" dimension count")
	if err != nil {
		return extent{}, err
	}
	if nd < 1 || nd > maxDims {
		return extent{}, fmt.Errorf("%s: %d dimensions (must be 1 to %d)", s.ctx, nd, maxDims)
	}
	dims, err := s.take(8*uint64(nd), " shape")
	if err != nil {
		return extent{}, err
	}
	shape := make([]uint64, nd)
	for j := range shape {
		shape[j] = binary.LittleEndian.Uint64(dims[8*j:])
	}
	typ, err := s.u32(" type")
	if err != nil {
		return extent{}, err
	}
	off, err := s.u64(" offset")
	if err != nil {
		return extent{}, err
	}
	n, err := tensorBytes(quant.Type(typ), shape)
	if err != nil {
		return extent{}, fmt.Errorf("%s: %w", s.ctx, err)
	}
	if off%align != 0 {
		return extent{}, fmt.Errorf("%s: data offset %d is not a multiple of the alignment %d", s.ctx, off, align)
	}
	return extent{name, off, n}, nil
}
