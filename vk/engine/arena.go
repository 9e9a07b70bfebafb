package engine

import (
	"fmt"

	"github.com/vkinfer/vkinfer/vk"
)

// align is the offset alignment of tensors inside an arena chunk: the
// largest minStorageBufferOffsetAlignment any Vulkan device reports.
const align = 256

// arena packs weights into a few large allocations, each no larger than the
// device allows for one allocation or one storage binding, so a 5 GB model
// fits NVIDIA's 4 GiB limits and uses tens of allocations, not hundreds. No
// tensor crosses a chunk.
type arena struct {
	dev    *vk.Device
	chunk  int64
	chunks []*vk.Buffer
	used   int64 // bytes used in the last chunk
	left   int64 // bytes of weights still to come (from Reserve)
}

// chunkSize is the size of a new chunk: 1 GiB, or less where the device's
// allocation or binding limit is lower.
func chunkSize(i vk.DeviceInfo) int64 {
	c := int64(1 << 30)
	for _, lim := range []uint64{i.MaxAllocation, i.MaxStorageRange} {
		if lim > 0 && lim < uint64(c) {
			c = int64(lim) &^ (align - 1)
		}
	}
	return c
}

// upload copies data into the arena and returns its binding. keep is how
// many bytes should still fit after it in the same chunk (see stackRoom):
// a new chunk starts where they would not, unless no chunk can hold them.
func (a *arena) upload(data []byte, keep int64) (vk.Binding, error) {
	size := (int64(len(data)) + 3) &^ 3 // bindings are whole 32-bit words
	if size > a.chunk {
		return vk.Binding{}, fmt.Errorf("vulkan: a tensor of %s exceeds the device's largest allocation or binding (%s)", bytes(uint64(size)), bytes(uint64(a.chunk)))
	}
	if size+keep > a.chunk {
		keep = 0
	}
	off := (a.used + align - 1) &^ (align - 1)
	if len(a.chunks) == 0 || off+size+keep > a.chunks[len(a.chunks)-1].Size() {
		// The last chunk only needs room for what is left, plus alignment.
		b, err := a.dev.NewBuffer(min(a.chunk, max(size+keep, a.left+a.left/64+1<<20)), false)
		if err != nil {
			return vk.Binding{}, fmt.Errorf("vulkan: weight memory: %w", err)
		}
		a.chunks = append(a.chunks, b)
		off = 0
	}
	buf := a.chunks[len(a.chunks)-1]
	if err := buf.Write(off, data); err != nil {
		return vk.Binding{}, fmt.Errorf("vulkan: uploading weights: %w", err)
	}
	a.used = off + size
	a.left = max(0, a.left-size)
	return vk.Binding{Buf: buf, Off: off, Size: size}, nil
}

func (a *arena) free() {
	for _, b := range a.chunks {
		b.Free()
	}
	a.chunks, a.used = nil, 0
}
