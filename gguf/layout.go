package gguf

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"
)

// checkAlignment accepts what ggml accepts for general.alignment: a power of
// two (data offsets are rounded up to it with a mask).
func checkAlignment(a uint32) error {
	if a == 0 || a&(a-1) != 0 {
		return fmt.Errorf("%s %d is not a power of two", alignmentKey, a)
	}
	return nil
}

// alignment reads the general.alignment entry k of file b. It must be a
// uint32, the type the spec gives it and the only one ggml.Decode honours:
// any other type would make Decode place the data section elsewhere.
func alignment(k keyInfo, b []byte) (uint64, error) {
	if k.typ != typeUint32 {
		return 0, fmt.Errorf("metadata key %q has type %s (must be uint32)", alignmentKey, k.typ)
	}
	a := binary.LittleEndian.Uint32(b[k.raw.start+4:])
	if err := checkAlignment(a); err != nil {
		return 0, err
	}
	return uint64(a), nil
}

func alignUp(x, a uint64) uint64 { return (x + a - 1) / a * a }

// tensorSpan is where a tensor's data lies in the file.
type tensorSpan struct {
	name string
	span
}

// place turns the extents into absolute ranges, checking that each lies
// inside a file of size bytes whose data section starts at dataStart, and
// that no two overlap (a writer bug that would silently alias weights).
func place(exts []extent, dataStart, size uint64) ([]tensorSpan, error) {
	spans := make([]tensorSpan, len(exts))
	for i, e := range exts {
		if dataStart > size || e.off > size-dataStart || e.n > size-dataStart-e.off {
			start, end := dataStart+e.off, dataStart+e.off+e.n
			if start < e.off || end < start {
				return nil, fmt.Errorf("tensor %s: data offset %d (+%d bytes) lies outside the file (size %d)",
					quote(e.name), e.off, e.n, size)
			}
			return nil, fmt.Errorf("tensor %s: data [%d, %d) lies outside the file (size %d)",
				quote(e.name), start, end, size)
		}
		spans[i] = tensorSpan{e.name, span{dataStart + e.off, dataStart + e.off + e.n}}
	}
	order := make([]int, len(spans))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(spans[a].start, spans[b].start) })
	for k := 1; k < len(order); k++ {
		a, b := order[k-1], order[k]
		if spans[a].end > spans[b].start {
			return nil, fmt.Errorf("tensors %s [%d, %d) and %s [%d, %d) overlap",
				quote(spans[a].name), spans[a].start, spans[a].end, quote(spans[b].name), spans[b].start, spans[b].end)
		}
	}
	return spans, nil
}
