package vk

/*
#include <string.h>
*/
import "C"

import (
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"sync"
	"unsafe"

	vk "github.com/vulkan-go/vulkan"
)

// Buffer is a storage buffer with its own memory allocation.
type Buffer struct {
	d      *Device
	h      vk.Buffer
	id     uint64
	mem    vk.DeviceMemory
	size   int64
	host   bool
	mapped unsafe.Pointer // host buffers: the persistent mapping (C memory)
}

const (
	memDeviceLocal  = 0x1
	memHostVisible  = 0x2
	memHostCoherent = 0x4
	memHostCached   = 0x8

	bufferUsage = 0x20 | 0x1 | 0x2 // storage | transfer src | transfer dst
)

// fmtBytes renders a size for error messages and reports.
func fmtBytes(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// memoryType picks the first type allowed by bits that has all of want,
// preferring one that also has prefer.
func (p *physical) memoryType(bits, want, prefer uint32) (uint32, bool) {
	found, ok := uint32(0), false
	for i := uint32(0); i < p.mem.memoryTypeCount; i++ {
		flags := p.mem.memoryTypes[i].propertyFlags
		if bits&(1<<i) == 0 || flags&want != want {
			continue
		}
		if flags&prefer == prefer {
			return i, true
		}
		if !ok {
			found, ok = i, true
		}
	}
	return found, ok
}

// NewBuffer allocates a storage buffer of size bytes that can also be a
// copy source and destination. host=false gives device-local memory;
// host=true gives host-visible coherent memory, mapped for Read and Write.
func (d *Device) NewBuffer(size int64, host bool) (*Buffer, error) {
	kind := "device-local"
	if host {
		kind = "host-visible"
	}
	if err := d.CanRun(); err != nil {
		return nil, err
	}
	if size <= 0 {
		return nil, fmt.Errorf("vk: %s buffer of %d bytes: size must be positive", kind, size)
	}
	if uint64(size) > d.info.MaxAllocation {
		return nil, fmt.Errorf("vk: %s buffer of %s exceeds the device's largest allocation (%s)", kind, fmtBytes(uint64(size)), fmtBytes(d.info.MaxAllocation))
	}
	if uint64(size) > d.info.MaxStorageRange {
		return nil, fmt.Errorf("vk: %s buffer of %s exceeds the device's largest storage buffer range (%s)", kind, fmtBytes(uint64(size)), fmtBytes(d.info.MaxStorageRange))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.alive(); err != nil {
		return nil, err
	}
	b := &Buffer{d: d, size: size, host: host}
	if err := b.create(kind); err != nil {
		b.release()
		return nil, err
	}
	d.buffers[b] = struct{}{}
	return b, nil
}

func (b *Buffer) create(kind string) error {
	d := b.d
	ci := &vk.BufferCreateInfo{
		SType:       vk.StructureTypeBufferCreateInfo,
		Size:        vk.DeviceSize(b.size),
		Usage:       vk.BufferUsageFlags(bufferUsage),
		SharingMode: vk.SharingModeExclusive,
	}
	// Handles come back through locals: cgo refuses a pointer into a struct
	// that holds Go pointers, such as Buffer.
	var h vk.Buffer
	if err := check(fmt.Sprintf("creating %s buffer of %s", kind, fmtBytes(uint64(b.size))), int32(vk.CreateBuffer(d.h, ci, nil, &h))); err != nil {
		return err
	}
	b.h = h
	b.id = uint64(uintptr(unsafe.Pointer(b.h)))
	var req vk.MemoryRequirements
	vk.GetBufferMemoryRequirements(d.h, b.h, &req)
	req.Deref()
	want, prefer := uint32(memDeviceLocal), uint32(memDeviceLocal)
	if b.host {
		want, prefer = memHostVisible|memHostCoherent, memHostVisible|memHostCoherent|memHostCached
	}
	ti, ok := d.phys.memoryType(req.MemoryTypeBits, want, prefer)
	if !ok {
		return fmt.Errorf("vk: device has no %s memory type for buffers", kind)
	}
	ai := &vk.MemoryAllocateInfo{
		SType:           vk.StructureTypeMemoryAllocateInfo,
		AllocationSize:  req.Size,
		MemoryTypeIndex: ti,
	}
	var mem vk.DeviceMemory
	r := int32(vk.AllocateMemory(d.h, ai, nil, &mem))
	b.mem = mem
	if r != resSuccess {
		heap := d.info.Heaps[d.phys.mem.memoryTypes[ti].heapIndex]
		return fmt.Errorf("%w (heap of %s, budget %s)", check(fmt.Sprintf("allocating %s of %s memory", fmtBytes(uint64(req.Size)), kind), r), fmtBytes(heap.Size), fmtBytes(heap.Budget))
	}
	if err := check("binding buffer memory", int32(vk.BindBufferMemory(d.h, b.h, b.mem, 0))); err != nil {
		return err
	}
	if b.host {
		var mapped unsafe.Pointer
		if err := check("mapping host buffer", int32(vk.MapMemory(d.h, b.mem, 0, vk.DeviceSize(vk.WholeSize), 0, &mapped))); err != nil {
			return err
		}
		b.mapped = mapped
	}
	return nil
}

// Size is the buffer's size in bytes.
func (b *Buffer) Size() int64 { return b.size }

// Host reports whether the buffer is host-visible.
func (b *Buffer) Host() bool { return b.host }

func (b *Buffer) span(op string, off int64, n int) error {
	if off < 0 || int64(n) > b.size-off || off > b.size {
		return fmt.Errorf("vk: %s of %d bytes at offset %d is outside the %d-byte buffer", op, n, off, b.size)
	}
	return nil
}

// Write copies data into the buffer at off. Device-local buffers go through
// a staging buffer in chunks of at most 64 MiB; Write returns once the data
// is on the device.
func (b *Buffer) Write(off int64, data []byte) error {
	if err := b.span("write", off, len(data)); err != nil {
		return err
	}
	if len(data) == 0 {
		return nil
	}
	if b.host {
		return b.d.hostCopy(func() { copy(b.bytes(off, len(data)), data) })
	}
	return b.d.staged(b, off, len(data), func(st *Buffer, done, n int) {
		copy(st.bytes(0, n), data[done:done+n])
	}, nil)
}

// Read copies len(dst) bytes from the buffer at off into dst.
func (b *Buffer) Read(off int64, dst []byte) error {
	if err := b.span("read", off, len(dst)); err != nil {
		return err
	}
	if len(dst) == 0 {
		return nil
	}
	if b.host {
		return b.d.hostCopy(func() { copy(dst, b.bytes(off, len(dst))) })
	}
	return b.d.staged(b, off, len(dst), nil, func(st *Buffer, done, n int) {
		copy(dst[done:done+n], st.bytes(0, n))
	})
}

// WriteF32 writes float32 values (little-endian, as the GPU reads them).
func (b *Buffer) WriteF32(off int64, v []float32) error {
	buf := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(x))
	}
	return b.Write(off, buf)
}

// ReadF32 reads len(dst) float32 values. A host buffer's are decoded
// straight from its mapping, with nothing allocated: a program reads its
// logits from one every token.
func (b *Buffer) ReadF32(off int64, dst []float32) error {
	n := 4 * len(dst)
	if b.host {
		if err := b.span("read", off, n); err != nil {
			return err
		}
		return b.d.hostCopy(func() { decodeF32Parallel(dst, b.bytes(off, n)) })
	}
	// Staging copies chunks that may split a value: whole bytes first.
	buf := make([]byte, n)
	if err := b.Read(off, buf); err != nil {
		return err
	}
	decodeF32(dst, buf)
	return nil
}

// decodeF32 sets dst to the little-endian float32 values of src. On a
// little-endian host, src 4-byte aligned, that is a plain copy: the logits
// of a batch of sequences are megabytes a step (64 of a 128k vocabulary:
// 33 MB), and a conversion value by value cost ten times the copy.
func decodeF32(dst []float32, src []byte) {
	if len(dst) == 0 {
		return
	}
	if p := unsafe.Pointer(unsafe.SliceData(src)); hostLittleEndian && len(src) >= 4*len(dst) && uintptr(p)%4 == 0 {
		copy(dst, unsafe.Slice((*float32)(p), len(dst)))
		return
	}
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
	}
}

// parallelBytes is the size past which decodeF32Parallel spreads a copy
// over several cores: one core copies a mapping at about 10 GB/s, and 64
// sequences' logits (33 MB) then cost milliseconds a step.
const parallelBytes = 4 << 20

// decodeF32Parallel is decodeF32, in up to 8 pieces on as many cores for
// large copies.
func decodeF32Parallel(dst []float32, src []byte) {
	parts := min(runtime.GOMAXPROCS(0), 8, 4*len(dst)/parallelBytes+1)
	if parts <= 1 {
		decodeF32(dst, src)
		return
	}
	var wg sync.WaitGroup
	step := (len(dst) + parts - 1) / parts
	for lo := 0; lo < len(dst); lo += step {
		hi := min(lo+step, len(dst))
		wg.Go(func() { decodeF32(dst[lo:hi], src[4*lo:4*hi]) })
	}
	wg.Wait()
}

// hostLittleEndian says whether the host stores a word's low byte first,
// as the GPU's buffers do.
var hostLittleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// bytes views part of a host buffer's mapping.
func (b *Buffer) bytes(off int64, n int) []byte {
	return unsafe.Slice((*byte)(unsafe.Add(b.mapped, off)), n)
}

// hostCopy runs a copy into or out of a mapping unless the device is closed
// (which unmaps it).
func (d *Device) hostCopy(f func()) error {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if err := d.alive(); err != nil {
		return err
	}
	f()
	return nil
}

// staged moves n bytes between device-local buffer b at off and host memory
// in chunks through the staging buffer: fill (for writes) copies a chunk into
// staging before the GPU copy, drain (for reads) copies it out after.
func (d *Device) staged(b *Buffer, off int64, n int, fill, drain func(st *Buffer, done, n int)) error {
	d.xferMu.Lock()
	defer d.xferMu.Unlock()
	st, err := d.stagingBuffer(int64(n))
	if err != nil {
		return err
	}
	// Read-locked so that Close cannot release the staging buffer and its
	// sequence mid-copy.
	d.mu.RLock()
	defer d.mu.RUnlock()
	if err := d.alive(); err != nil {
		return err
	}
	for done := 0; done < n; {
		c := int(min(int64(n-done), st.size))
		at := Binding{Buf: b, Off: off + int64(done), Size: int64(c)}
		stage := Binding{Buf: st, Size: int64(c)}
		if err := d.xfer.reset(); err != nil {
			return err
		}
		if fill != nil {
			fill(st, done, c)
			d.xfer.Copy(at, stage)
		} else {
			d.xfer.Copy(stage, at)
		}
		if err := d.xfer.End(); err != nil {
			return err
		}
		if err := d.xfer.Run(); err != nil {
			return err
		}
		if drain != nil {
			drain(st, done, c)
		}
		done += c
	}
	return nil
}

// stagingBuffer returns a host buffer of at least min(want, stagingMax)
// bytes, growing the previous one, and the sequence that copies through it.
func (d *Device) stagingBuffer(want int64) (*Buffer, error) {
	want = min(want, d.stagingMax)
	if d.staging != nil && d.staging.size >= want {
		return d.staging, nil
	}
	if d.staging != nil {
		d.staging.Free()
		d.staging = nil
	}
	st, err := d.NewBuffer(want, true)
	if err != nil {
		return nil, fmt.Errorf("staging buffer: %w", err)
	}
	d.staging = st
	if d.xfer == nil {
		d.xfer = d.NewSequence()
	}
	return st, nil
}

// Free releases the buffer; it must not be in use by a running sequence.
func (b *Buffer) Free() {
	d := b.d
	d.mu.Lock()
	_, ok := d.buffers[b]
	delete(d.buffers, b)
	d.mu.Unlock()
	if ok {
		b.release()
	}
}

func (b *Buffer) release() {
	d := b.d
	if b.mapped != nil {
		vk.UnmapMemory(d.h, b.mem)
		b.mapped = nil
	}
	if b.h != vk.NullBuffer {
		vk.DestroyBuffer(d.h, b.h, nil)
		b.h = vk.NullBuffer
	}
	if b.mem != vk.NullDeviceMemory {
		vk.FreeMemory(d.h, b.mem, nil)
		b.mem = vk.NullDeviceMemory
	}
}
