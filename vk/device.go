package vk

/*
#include <stdlib.h>
#include "cvk.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	vk "github.com/vulkan-go/vulkan"
)

// Options selects and configures the device Open creates.
type Options struct {
	Device     int  // index into Devices(); -1 = choose (discrete > integrated > virtual; CPU drivers only if AllowCPU or nothing else exists)
	AllowCPU   bool // let -1 choose a CPU driver such as lavapipe even when a GPU exists
	Validation bool // enable VK_LAYER_KHRONOS_validation and record every warning and error it reports (Messages); info and verbose messages are loader chatter and are not kept
	// GPUAssisted adds the layer's GPU-assisted validation to Validation:
	// shaders are instrumented to report out-of-bounds buffer accesses
	// as they run. Several times slower; for tests.
	GPUAssisted bool
}

// Device is an open logical device with one compute queue. Its methods are
// safe for concurrent use; a Sequence or Buffer belongs to one goroutine at a
// time.
type Device struct {
	inst *instance
	// msgFrom is where the device's validation messages start in its
	// instance's log; msgTo where they end once it is closed (-1 before),
	// guarded by mu.
	msgFrom int
	msgTo   int
	phys    *physical
	info    DeviceInfo
	h       vk.Device
	id      uint64
	queue   uint64
	fns     *C.vkr_fns // C memory: read by the C recording functions

	queueMu sync.Mutex // vkQueueSubmit needs the queue externally synchronised

	mu        sync.RWMutex // guards the fields below; read-locked while a mapping is in use
	closed    bool
	pipelines map[string]*Pipeline
	buffers   map[*Buffer]struct{}
	sequences map[*Sequence]struct{}
	cache     pipelineCache

	xferMu     sync.Mutex // serialises Buffer.Read/Write through the staging buffer
	staging    *Buffer
	stagingMax int64
	xfer       *Sequence

	profiling atomic.Bool
	// ran is set once a sequence has been submitted: only then can the
	// queue have work to wait for.
	ran atomic.Bool
}

// defaultStaging bounds the host-visible buffer that device-local reads and
// writes pass through.
const defaultStaging = 64 << 20

// Open creates the instance, chooses a device, and creates a logical device
// with one compute queue and the optional features the kernels use enabled
// where supported: 16- and 8-bit storage, float16/int8 arithmetic, subgroup
// extended types, subgroup size control with full subgroups, integer dot
// product, 16/64-bit integers, the Vulkan memory model, cooperative
// matrices (DeviceInfo.CoopMatrix), and pipeline executable properties (see
// Pipeline.Statistics).
func Open(o Options) (*Device, error) {
	in, err := sharedInstance(o.Validation, o.GPUAssisted)
	if err != nil {
		return nil, err
	}
	return open(in, o)
}

func open(in *instance, o Options) (*Device, error) {
	devs, err := in.physicalDevices()
	if err != nil {
		return nil, err
	}
	p, err := choose(devs, o)
	if err != nil {
		return nil, err
	}
	d := &Device{
		inst:       in,
		msgFrom:    in.claim(),
		msgTo:      -1,
		phys:       p,
		info:       p.info,
		pipelines:  map[string]*Pipeline{},
		buffers:    map[*Buffer]struct{}{},
		sequences:  map[*Sequence]struct{}{},
		stagingMax: defaultStaging,
	}
	if err := d.createDevice(); err != nil {
		return nil, fmt.Errorf("device %d (%s): %w", p.info.Index, p.info.Name, err)
	}
	d.cache = openPipelineCache(d)
	return d, nil
}

// deviceExtensionsToEnable names the extensions whose features Open enables
// on devices where they are not core, plus the portability subset, which the
// spec requires enabling wherever it is advertised, and pipeline executable
// properties where its feature is supported.
func (p *physical) deviceExtensionsToEnable() []string {
	var names []string
	v13 := p.api >= vk.MakeVersion(1, 3, 0)
	for _, e := range []struct {
		name string
		core bool
	}{
		{"VK_EXT_subgroup_size_control", v13},
		{"VK_KHR_shader_integer_dot_product", v13},
		{"VK_KHR_portability_subset", false},
	} {
		if p.exts[e.name] && !e.core {
			names = append(names, cstr(e.name))
		}
	}
	// Only with its feature: the extension alone captures nothing.
	if p.info.PipelineStatistics {
		names = append(names, cstr(extPipelineExecutableProperties))
	}
	// Only where compute shaders can use it (DeviceInfo.CoopMatrix).
	if p.info.CoopMatrix {
		names = append(names, cstr(extCoopMatrix))
	}
	return names
}

func (d *Device) createDevice() error {
	p := d.phys
	var pin runtime.Pinner
	defer pin.Unpin()

	// Enable exactly what the device reported for the optional structs; of
	// the core features only 16/64-bit integers, since others such as
	// robustBufferAccess cost speed.
	en := new(featureSet)
	*en = *p.feat
	en.features = physicalDeviceFeatures2{sType: stFeatures2}
	en.features.features[featShaderInt16] = p.feat.features.features[featShaderInt16]
	en.features.features[featShaderInt64] = p.feat.features.features[featShaderInt64]
	// Robust cooperative-matrix loads only matter with robustBufferAccess,
	// which stays off.
	en.coopMat.cooperativeMatrixRobustBufferAccess = 0
	en.link(&pin, p.exts, p.api >= minVersion, p.api >= vk.MakeVersion(1, 3, 0), p.info.PipelineStatistics, p.info.CoopMatrix)

	exts := p.deviceExtensionsToEnable()
	ci := &vk.DeviceCreateInfo{
		SType:                vk.StructureTypeDeviceCreateInfo,
		PNext:                unsafe.Pointer(&en.features),
		QueueCreateInfoCount: 1,
		PQueueCreateInfos: []vk.DeviceQueueCreateInfo{{
			SType:            vk.StructureTypeDeviceQueueCreateInfo,
			QueueFamilyIndex: p.family,
			QueueCount:       1,
			PQueuePriorities: []float32{1},
		}},
		EnabledExtensionCount:   uint32(len(exts)),
		PpEnabledExtensionNames: exts,
	}
	// Handles come back through locals: cgo refuses a pointer into a struct
	// that holds Go pointers, such as Device.
	var h vk.Device
	if err := check("creating device", int32(paused(func() vk.Result { return vk.CreateDevice(p.h, ci, nil, &h) }))); err != nil {
		return err
	}
	d.h = h
	d.id = uint64(uintptr(unsafe.Pointer(d.h)))
	var q vk.Queue
	vk.GetDeviceQueue(d.h, p.family, 0, &q)
	d.queue = uint64(uintptr(unsafe.Pointer(q)))
	if err := d.loadFunctions(); err != nil {
		vk.DestroyDevice(d.h, nil)
		return err
	}
	return nil
}

// loadFunctions fills the C function table from vkGetDeviceProcAddr, which
// returns the driver's (or layer's) entry points directly.
func (d *Device) loadFunctions() error {
	gdpa := proc(d.inst.id, "vkGetDeviceProcAddr")
	if gdpa == nil {
		return fmt.Errorf("vulkan: the loader lacks the entry point vkGetDeviceProcAddr")
	}
	fns, stats, err := deviceFunctions(func(name string) unsafe.Pointer { return d.deviceProc(gdpa, name) }, d.info.PipelineStatistics)
	if err != nil {
		return fmt.Errorf("vulkan: %w", err)
	}
	d.fns, d.info.PipelineStatistics = fns, stats
	return nil
}

// deviceFunctions allocates the C function table and fills it through get.
// Every recording and submission entry point is required. The statistics
// queries exist only with their extension enabled, so they are looked up
// only when statistics is set; a driver that enables it without them just
// reports no statistics, which the second result says.
func deviceFunctions(get func(name string) unsafe.Pointer, statistics bool) (*C.vkr_fns, bool, error) {
	f := (*C.vkr_fns)(C.calloc(1, C.sizeof_vkr_fns))
	err := resolve(get, []entry{
		{&f.allocateDescriptorSets, "vkAllocateDescriptorSets"},
		{&f.updateDescriptorSets, "vkUpdateDescriptorSets"},
		{&f.cmdBindPipeline, "vkCmdBindPipeline"},
		{&f.cmdBindDescriptorSets, "vkCmdBindDescriptorSets"},
		{&f.cmdPushConstants, "vkCmdPushConstants"},
		{&f.cmdDispatch, "vkCmdDispatch"},
		{&f.cmdPipelineBarrier, "vkCmdPipelineBarrier"},
		{&f.cmdCopyBuffer, "vkCmdCopyBuffer"},
		{&f.cmdWriteTimestamp, "vkCmdWriteTimestamp"},
		{&f.cmdResetQueryPool, "vkCmdResetQueryPool"},
		{&f.beginCommandBuffer, "vkBeginCommandBuffer"},
		{&f.endCommandBuffer, "vkEndCommandBuffer"},
		{&f.queueSubmit, "vkQueueSubmit"},
		{&f.waitForFences, "vkWaitForFences"},
		{&f.resetFences, "vkResetFences"},
		{&f.getQueryPoolResults, "vkGetQueryPoolResults"},
	})
	if err != nil {
		freeFunctions(f)
		return nil, false, err
	}
	if statistics && resolve(get, []entry{
		{&f.getPipelineExecutableProperties, "vkGetPipelineExecutablePropertiesKHR"},
		{&f.getPipelineExecutableStatistics, "vkGetPipelineExecutableStatisticsKHR"},
	}) != nil {
		f.getPipelineExecutableProperties, f.getPipelineExecutableStatistics = nil, nil
		statistics = false
	}
	return f, statistics, nil
}

func freeFunctions(f *C.vkr_fns) { C.free(unsafe.Pointer(f)) }

func (d *Device) deviceProc(gdpa unsafe.Pointer, name string) unsafe.Pointer {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	return C.vkr_device_proc(gdpa, C.uint64_t(d.id), cname)
}

// Info describes the device.
func (d *Device) Info() DeviceInfo {
	i := d.info
	i.Heaps = append([]Heap(nil), i.Heaps...)
	i.QueueFamilies = append([]QueueFamily(nil), i.QueueFamilies...)
	i.CoopMatShapes = append([]CoopMatShape(nil), i.CoopMatShapes...)
	return i
}

// Messages returns the validation messages recorded since the device was
// opened (nil without Options.Validation), the instance's creation
// included for the first device opened on it. It stays valid after Close,
// which adds any message raised while destroying the device. Devices open
// at the same time share one instance, and so each other's messages.
func (d *Device) Messages() []string {
	d.mu.RLock()
	to := d.msgTo
	d.mu.RUnlock()
	return d.inst.messages(d.msgFrom, to)
}

// SetProfiling makes later Dispatch calls write timestamps around each
// dispatch; see Sequence.Timings.
func (d *Device) SetProfiling(on bool) { d.profiling.Store(on) }

// Close waits for the device to go idle if it ever ran work, releases every
// buffer, sequence and pipeline made from it, saves the pipeline cache and
// destroys the device; its instance stays for the next device (see
// instances). Calling it again does nothing.
func (d *Device) Close() {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return
	}
	d.closed = true
	seqs, bufs := d.sequences, d.buffers
	d.sequences, d.buffers = nil, nil
	d.mu.Unlock()

	// A device that never ran work has nothing to wait for, and one that
	// cannot run work may not survive the wait: RADV's null device crashes
	// in vkDeviceWaitIdle (its winsys implements neither submission nor
	// waiting). So the queue is only touched after a submission.
	if d.ran.Load() {
		vk.DeviceWaitIdle(d.h)
	}
	for s := range seqs {
		s.release()
	}
	for b := range bufs {
		b.release()
	}
	for _, p := range d.pipelines {
		p.release()
	}
	d.cache.close(d)
	freeFunctions(d.fns)
	vk.DestroyDevice(d.h, nil)
	n := d.inst.logged()
	d.mu.Lock()
	d.msgTo = n
	d.mu.Unlock()
}

// alive fails once the device is closed; callers hold d.mu.
func (d *Device) alive() error {
	if d.closed {
		return fmt.Errorf("vk: device %s is closed", d.info.Name)
	}
	return nil
}
