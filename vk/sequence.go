package vk

/*
#include <stdlib.h>
#include "cvk.h"
*/
import "C"

import (
	"fmt"
	"unsafe"

	vk "github.com/vulkan-go/vulkan"
)

// Binding is a range of a buffer bound to a shader or copied.
type Binding struct {
	Buf       *Buffer
	Off, Size int64 // Size 0 = to the end of the buffer
}

// Sequence is a command buffer recorded once and submitted many times.
// Recording errors are kept and returned by End and Run, so Dispatch, Copy
// and Barrier need no error checks. A Sequence is not safe for concurrent
// use; separate sequences may be recorded on separate goroutines.
type Sequence struct {
	d     *Device
	pool  vk.CommandPool // one per sequence so that recording needs no lock
	cmd   vk.CommandBuffer
	fence vk.Fence
	sc    *scratch // C memory

	dpools []vk.DescriptorPool
	dpool  int // index of the pool sets come from
	// Sets and descriptors taken from dpools[dpool]. Drivers may allocate
	// past a pool's sizes (lavapipe does), so the sequence moves on itself
	// rather than waiting for VK_ERROR_OUT_OF_POOL_MEMORY.
	poolSets, poolDescs int

	prof  profile
	label string // the next dispatch's profile detail (Label)
	ended bool
	runs  int
	err   error
}

// scratch holds, in C memory, the structs that recording and submission
// pass to Vulkan, so that the hot path allocates nothing and hands cgo no
// Go pointers.
type scratch struct {
	alloc     descriptorSetAllocateInfo
	setLayout uint64
	write     writeDescriptorSet
	infos     [maxBindings]descriptorBufferInfo
	push      [128]byte
	barrier   memoryBarrier
	region    bufferCopy
	begin     commandBufferBeginInfo
	submit    submitInfo
	cmd       uint64
	fence     uint64
}

// Pipeline stages and access masks for barriers.
const (
	stageCompute  = 0x800
	stageTransfer = 0x1000
	stageHost     = 0x4000

	accessShaderRead    = 0x20
	accessShaderWrite   = 0x40
	accessTransferRead  = 0x800
	accessTransferWrite = 0x1000
	accessHostRead      = 0x2000

	descriptorTypeStorageBuffer = 7

	setsPerPool        = 1024
	descriptorsPerPool = 8 * setsPerPool
)

// NewSequence starts recording a sequence. It begins with a barrier against
// earlier submissions, so a sequence may read what the previous Run wrote.
func (d *Device) NewSequence() *Sequence {
	s := &Sequence{d: d}
	d.mu.Lock()
	defer d.mu.Unlock()
	if s.err = d.alive(); s.err != nil {
		return s
	}
	if s.err = d.CanRun(); s.err != nil {
		return s
	}
	if s.err = s.create(); s.err != nil {
		s.release()
		return s
	}
	d.sequences[s] = struct{}{}
	s.begin()
	return s
}

func (s *Sequence) create() error {
	d := s.d
	pci := &vk.CommandPoolCreateInfo{
		SType:            vk.StructureTypeCommandPoolCreateInfo,
		QueueFamilyIndex: d.phys.family,
	}
	// Handles come back through locals: cgo refuses a pointer into a struct
	// that holds Go pointers, such as Sequence.
	var pool vk.CommandPool
	if err := check("creating command pool", int32(vk.CreateCommandPool(d.h, pci, nil, &pool))); err != nil {
		return err
	}
	s.pool = pool
	cmds := make([]vk.CommandBuffer, 1)
	ai := &vk.CommandBufferAllocateInfo{
		SType:              vk.StructureTypeCommandBufferAllocateInfo,
		CommandPool:        s.pool,
		Level:              vk.CommandBufferLevelPrimary,
		CommandBufferCount: 1,
	}
	if err := check("allocating command buffer", int32(paused(func() vk.Result { return vk.AllocateCommandBuffers(d.h, ai, cmds) }))); err != nil {
		return err
	}
	s.cmd = cmds[0]
	fci := &vk.FenceCreateInfo{SType: vk.StructureTypeFenceCreateInfo}
	var fence vk.Fence
	if err := check("creating fence", int32(vk.CreateFence(d.h, fci, nil, &fence))); err != nil {
		return err
	}
	s.fence = fence
	s.sc = (*scratch)(C.calloc(1, C.size_t(unsafe.Sizeof(scratch{}))))
	sc := s.sc
	sc.alloc = descriptorSetAllocateInfo{sType: stDescriptorSetAllocateInfo, descriptorSetCount: 1, pSetLayouts: unsafe.Pointer(&sc.setLayout)}
	sc.write = writeDescriptorSet{sType: stWriteDescriptorSet, descriptorType: descriptorTypeStorageBuffer, pBufferInfo: unsafe.Pointer(&sc.infos[0])}
	sc.begin = commandBufferBeginInfo{sType: stCommandBufferBeginInfo}
	sc.cmd = uint64(uintptr(unsafe.Pointer(s.cmd)))
	sc.fence = uint64(uintptr(unsafe.Pointer(s.fence)))
	sc.submit = submitInfo{sType: stSubmitInfo, commandBufferCount: 1, pCommandBuffers: unsafe.Pointer(&sc.cmd)}
	return nil
}

func (s *Sequence) fail(format string, args ...any) {
	if s.err == nil {
		s.err = fmt.Errorf("vk: "+format, args...)
	}
}

// recording reports whether commands may be recorded now.
func (s *Sequence) recording() bool {
	if s.err != nil {
		return false
	}
	if s.ended {
		s.fail("recording into a sequence after End")
		return false
	}
	return true
}

func (s *Sequence) begin() {
	if err := check("beginning command buffer", int32(C.vkr_begin(s.d.fns, C.uint64_t(s.sc.cmd), unsafe.Pointer(&s.sc.begin)))); err != nil {
		s.err = err
		return
	}
	s.Barrier()
}

// reset empties the sequence for recording anew.
func (s *Sequence) reset() error {
	if s.sc == nil {
		return s.err
	}
	d := s.d
	if err := check("resetting command pool", int32(vk.ResetCommandPool(d.h, s.pool, 0))); err != nil {
		return err
	}
	for _, p := range s.dpools {
		if err := check("resetting descriptor pool", int32(vk.ResetDescriptorPool(d.h, p, 0))); err != nil {
			return err
		}
	}
	s.dpool, s.poolSets, s.poolDescs = 0, 0, 0
	s.ended, s.runs, s.err = false, 0, nil
	s.prof.reset()
	s.begin()
	return s.err
}

// resolve checks a binding against its buffer and returns the byte range.
// what and name label errors; they are only joined on failure so that the
// hot path does not allocate.
func (s *Sequence) resolve(what, name string, b Binding) (off, size int64, ok bool) {
	if b.Buf == nil || b.Buf.h == vk.NullBuffer {
		s.fail("%s%s: no buffer (nil or freed)", what, name)
		return 0, 0, false
	}
	if b.Buf.d != s.d {
		s.fail("%s%s: buffer belongs to another device", what, name)
		return 0, 0, false
	}
	size = b.Size
	if size == 0 {
		size = b.Buf.size - b.Off
	}
	if b.Off < 0 || size <= 0 || b.Off > b.Buf.size || size > b.Buf.size-b.Off {
		s.fail("%s%s: range [%d, +%d) is outside the %d-byte buffer", what, name, b.Off, b.Size, b.Buf.size)
		return 0, 0, false
	}
	return b.Off, size, true
}

// Dispatch records p with the given buffers and push constants over
// x×y×z workgroups. Its descriptor set comes from the sequence's pools and
// lives as long as the sequence. With profiling on, timestamps bracket it.
func (s *Sequence) Dispatch(p *Pipeline, bind []Binding, push []byte, x, y, z uint32) {
	if !s.recording() {
		return
	}
	switch {
	case p == nil || p.d != s.d:
		s.fail("dispatch: pipeline is nil or from another device")
		return
	case len(bind) != p.spec.Bindings:
		s.fail("dispatch %s: %d bindings, the pipeline has %d", p.spec.Name, len(bind), p.spec.Bindings)
		return
	case len(push) != p.spec.PushSize:
		s.fail("dispatch %s: %d bytes of push constants, the pipeline has %d", p.spec.Name, len(push), p.spec.PushSize)
		return
	}
	if lim := s.d.info.MaxWorkgroupCount; x > lim[0] || y > lim[1] || z > lim[2] {
		s.fail("dispatch %s: %d×%d×%d workgroups exceed the device's %d×%d×%d", p.spec.Name, x, y, z, lim[0], lim[1], lim[2])
		return
	}
	sc := s.sc
	align := int64(s.d.phys.limits.MinStorageBufferOffsetAlignment)
	for i, b := range bind {
		off, size, ok := s.resolve("dispatch ", p.spec.Name, b)
		if !ok {
			return
		}
		if off%align != 0 {
			s.fail("dispatch %s: binding %d offset %d is not a multiple of the device's storage alignment %d", p.spec.Name, i, off, align)
			return
		}
		if uint64(size) > s.d.info.MaxStorageRange {
			s.fail("dispatch %s: binding %d spans %s; the device binds at most %s", p.spec.Name, i, fmtBytes(uint64(size)), fmtBytes(s.d.info.MaxStorageRange))
			return
		}
		sc.infos[i] = descriptorBufferInfo{buffer: b.Buf.id, offset: uint64(off), _range: uint64(size)}
	}
	copy(sc.push[:], push)
	var qpool C.uint64_t
	var query C.uint32_t
	if s.d.profiling.Load() {
		name := p.spec.Name
		if s.label != "" {
			name += " " + s.label
			s.label = ""
		}
		pool, q, err := s.prof.next(s, name)
		if err != nil {
			s.err = err
			return
		}
		qpool, query = C.uint64_t(pool), C.uint32_t(q)
	}
	for fresh := false; ; {
		allocInfo, set, write := unsafe.Pointer(nil), (*C.uint64_t)(nil), unsafe.Pointer(nil)
		if len(bind) > 0 {
			if s.poolSets == setsPerPool || s.poolDescs+len(bind) > descriptorsPerPool {
				s.nextPool()
			}
			if s.dpool == len(s.dpools) {
				if err := s.addPool(); err != nil {
					s.err = err
					return
				}
				fresh = true
			}
			sc.setLayout = p.setLayoutID
			sc.alloc.descriptorPool = uint64(uintptr(unsafe.Pointer(s.dpools[s.dpool])))
			sc.write.descriptorCount = uint32(len(bind))
			allocInfo, set, write = unsafe.Pointer(&sc.alloc), (*C.uint64_t)(unsafe.Pointer(&sc.write.dstSet)), unsafe.Pointer(&sc.write)
		}
		r := int32(C.vkr_dispatch(s.d.fns, C.uint64_t(s.d.id), C.uint64_t(sc.cmd), allocInfo, set, write,
			C.uint64_t(p.id), C.uint64_t(p.layoutID), C.uint32_t(len(push)), unsafe.Pointer(&sc.push[0]),
			C.uint32_t(x), C.uint32_t(y), C.uint32_t(z), qpool, query))
		if (r == resOutOfPoolMemory || r == resFragmentedPool) && !fresh {
			s.nextPool()
			continue
		}
		if r != resSuccess {
			s.err = check("allocating descriptor set for "+p.spec.Name, r)
			return
		}
		s.poolSets++
		s.poolDescs += len(bind)
		return
	}
}

// nextPool moves set allocation on to the next descriptor pool, which
// Dispatch creates when it does not exist yet.
func (s *Sequence) nextPool() {
	s.dpool++
	s.poolSets, s.poolDescs = 0, 0
}

// addPool creates another descriptor pool when the current ones are full.
func (s *Sequence) addPool() error {
	ci := &vk.DescriptorPoolCreateInfo{
		SType:         vk.StructureTypeDescriptorPoolCreateInfo,
		MaxSets:       setsPerPool,
		PoolSizeCount: 1,
		PPoolSizes: []vk.DescriptorPoolSize{{
			Type:            vk.DescriptorTypeStorageBuffer,
			DescriptorCount: descriptorsPerPool,
		}},
	}
	var pool vk.DescriptorPool
	if err := check("creating descriptor pool", int32(paused(func() vk.Result { return vk.CreateDescriptorPool(s.d.h, ci, nil, &pool) }))); err != nil {
		return err
	}
	s.dpools = append(s.dpools, pool)
	return nil
}

// Barrier makes the writes of earlier dispatches and copies visible to later
// ones.
func (s *Sequence) Barrier() {
	s.barrier(stageCompute|stageTransfer, accessShaderWrite|accessTransferWrite,
		stageCompute|stageTransfer, accessShaderRead|accessShaderWrite|accessTransferRead|accessTransferWrite)
}

func (s *Sequence) barrier(src, srcAccess, dst, dstAccess uint32) {
	if !s.recording() {
		return
	}
	s.sc.barrier = memoryBarrier{sType: stMemoryBarrier, srcAccessMask: srcAccess, dstAccessMask: dstAccess}
	C.vkr_barrier(s.d.fns, C.uint64_t(s.sc.cmd), C.uint32_t(src), C.uint32_t(dst), unsafe.Pointer(&s.sc.barrier))
}

// Copy records a buffer-to-buffer copy. Its size is src.Size, else dst.Size,
// else the rest of src.
func (s *Sequence) Copy(dst, src Binding) {
	if !s.recording() {
		return
	}
	if src.Size == 0 {
		src.Size = dst.Size
	}
	soff, n, ok := s.resolve("copy source", "", src)
	if !ok {
		return
	}
	dst.Size = n
	doff, _, ok := s.resolve("copy destination", "", dst)
	if !ok {
		return
	}
	if src.Buf == dst.Buf && soff < doff+n && doff < soff+n {
		s.fail("copy: source [%d, +%d) and destination [%d, +%d) overlap", soff, n, doff, n)
		return
	}
	s.sc.region = bufferCopy{srcOffset: uint64(soff), dstOffset: uint64(doff), size: uint64(n)}
	C.vkr_copy(s.d.fns, C.uint64_t(s.sc.cmd), C.uint64_t(src.Buf.id), C.uint64_t(dst.Buf.id), unsafe.Pointer(&s.sc.region))
}

// End finishes recording, adding a barrier that makes the results visible
// to the host once Run returns. It returns the first recording error.
func (s *Sequence) End() error {
	if !s.recording() {
		return s.err
	}
	s.barrier(stageCompute|stageTransfer, accessShaderWrite|accessTransferWrite, stageHost, accessHostRead)
	if err := check("ending command buffer", int32(C.vkr_end(s.d.fns, C.uint64_t(s.sc.cmd)))); err != nil && s.err == nil {
		s.err = err
	}
	s.ended = true
	return s.err
}

// Run submits the sequence and waits for it to finish. It may be called any
// number of times after End.
func (s *Sequence) Run() error {
	if s.err != nil {
		return s.err
	}
	if !s.ended {
		return fmt.Errorf("vk: Run before End")
	}
	d := s.d
	d.ran.Store(true)
	d.queueMu.Lock()
	r := int32(C.vkr_submit_wait(d.fns, C.uint64_t(d.id), C.uint64_t(d.queue), unsafe.Pointer(&s.sc.submit), (*C.uint64_t)(unsafe.Pointer(&s.sc.fence))))
	d.queueMu.Unlock()
	if err := check("running sequence", r); err != nil {
		return err
	}
	s.runs++
	return nil
}

// Free releases the sequence; it must not be running.
func (s *Sequence) Free() {
	d := s.d
	d.mu.Lock()
	_, ok := d.sequences[s]
	delete(d.sequences, s)
	d.mu.Unlock()
	if ok {
		s.release()
	}
}

func (s *Sequence) release() {
	d := s.d
	s.prof.release(d)
	for _, p := range s.dpools {
		vk.DestroyDescriptorPool(d.h, p, nil)
	}
	s.dpools = nil
	if s.fence != vk.NullFence {
		vk.DestroyFence(d.h, s.fence, nil)
		s.fence = vk.NullFence
	}
	if s.pool != vk.NullCommandPool {
		vk.DestroyCommandPool(d.h, s.pool, nil) // frees the command buffer too
		s.pool = vk.NullCommandPool
	}
	if s.sc != nil {
		C.free(unsafe.Pointer(s.sc))
		s.sc = nil
	}
	if s.err == nil {
		s.err = fmt.Errorf("vk: sequence used after Free")
	}
}
