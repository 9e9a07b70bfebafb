package vk

import (
	"bytes"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"unsafe"

	vk "github.com/vulkan-go/vulkan"
)

// PipelineSpec describes a compute pipeline.
type PipelineSpec struct {
	Name         string   // for reports and profiling; with Spec and SubgroupSize the memo key
	SPIRV        []byte   // entry point "main"
	Bindings     int      // storage buffers at set 0, bindings 0..Bindings-1
	PushSize     int      // bytes of push constants (0..128, a multiple of 4)
	Spec         []uint32 // specialization constants, constant_id 0..len-1
	SubgroupSize int      // 0 = driver's choice; else exactly this size with full subgroups
}

// maxBindings bounds PipelineSpec.Bindings; it sizes each Sequence's
// descriptor scratch space.
const maxBindings = 32

// Pipeline is a compute pipeline with its layouts.
type Pipeline struct {
	d         *Device
	spec      PipelineSpec
	local     [3]uint32
	setLayout vk.DescriptorSetLayout
	layout    vk.PipelineLayout
	h         vk.Pipeline
	// Handles as the C recording functions take them.
	setLayoutID, layoutID, id uint64
}

// Name is the pipeline's PipelineSpec.Name.
func (p *Pipeline) Name() string { return p.spec.Name }

// LocalSize is the workgroup size after specialization.
func (p *Pipeline) LocalSize() [3]uint32 { return p.local }

// SubgroupSize is the required subgroup size, or 0 for the driver's choice.
func (p *Pipeline) SubgroupSize() int { return p.spec.SubgroupSize }

// Bindings is the number of storage buffers the pipeline binds (PipelineSpec.Bindings).
func (p *Pipeline) Bindings() int { return p.spec.Bindings }

// Spec is the pipeline's PipelineSpec (a copy).
func (p *Pipeline) Spec() PipelineSpec {
	s := p.spec
	s.Spec = slices.Clone(s.Spec)
	return s
}

func (s PipelineSpec) key() string {
	return fmt.Sprintf("%s|%v|%d", s.Name, s.Spec, s.SubgroupSize)
}

// Pipeline returns the compute pipeline for s, building it on first use and
// returning the same one for the same (Name, Spec, SubgroupSize).
func (d *Device) Pipeline(s PipelineSpec) (*Pipeline, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.alive(); err != nil {
		return nil, err
	}
	if p, ok := d.pipelines[s.key()]; ok {
		if p.spec.Bindings != s.Bindings || p.spec.PushSize != s.PushSize || !bytes.Equal(p.spec.SPIRV, s.SPIRV) {
			return nil, fmt.Errorf("vk: pipeline %q was already built from different SPIR-V, bindings or push size", s.Name)
		}
		return p, nil
	}
	p := &Pipeline{d: d, spec: s}
	p.spec.Spec = append([]uint32(nil), s.Spec...)
	words, err := d.checkSpec(p)
	if err == nil {
		// One pause for the build's four binding calls: the first pause
		// runs a collection (gcpause.go), the nested ones none.
		WithoutGC(func() { err = p.build(words) })
	}
	if err != nil {
		p.release()
		return nil, fmt.Errorf("vk: pipeline %q: %w", s.Name, err)
	}
	d.pipelines[s.key()] = p
	d.cache.dirty = true
	return p, nil
}

// Pipelines lists the pipelines built on the device so far, by name, then
// specialization: what a set of recordings compiled.
func (d *Device) Pipelines() []*Pipeline {
	d.mu.RLock()
	defer d.mu.RUnlock()
	keys := slices.Sorted(maps.Keys(d.pipelines))
	ps := make([]*Pipeline, len(keys))
	for i, k := range keys {
		ps[i] = d.pipelines[k]
	}
	return ps
}

// checkSpec rejects what the driver or the validation layer would, with a
// message that names the limit; it returns the SPIR-V as words.
func (d *Device) checkSpec(p *Pipeline) ([]uint32, error) {
	s, info, lim := p.spec, d.info, d.phys.limits
	if s.Name == "" {
		return nil, fmt.Errorf("no name")
	}
	words, err := spirvWords(s.SPIRV)
	if err != nil {
		return nil, err
	}
	if s.Bindings < 0 || s.Bindings > min(maxBindings, int(lim.MaxPerStageDescriptorStorageBuffers)) {
		return nil, fmt.Errorf("%d bindings; the device allows 0..%d", s.Bindings, min(maxBindings, int(lim.MaxPerStageDescriptorStorageBuffers)))
	}
	if s.PushSize < 0 || s.PushSize%4 != 0 || s.PushSize > int(lim.MaxPushConstantsSize) {
		return nil, fmt.Errorf("push constant size %d must be a multiple of 4 in 0..%d", s.PushSize, lim.MaxPushConstantsSize)
	}
	if s.SubgroupSize != 0 {
		if !info.SizeControl {
			return nil, fmt.Errorf("subgroup size %d requested but %s cannot require a compute subgroup size", s.SubgroupSize, info.Name)
		}
		sz := s.SubgroupSize
		if sz < info.MinSubgroupSize || sz > info.MaxSubgroupSize || sz&(sz-1) != 0 {
			return nil, fmt.Errorf("subgroup size %d is not supported; %s allows powers of two in [%d, %d]", sz, info.Name, info.MinSubgroupSize, info.MaxSubgroupSize)
		}
	}
	if p.local, err = localSize(words, s.Spec); err != nil {
		return nil, err
	}
	l := p.local
	total := uint64(l[0]) * uint64(l[1]) * uint64(l[2])
	for i := range l {
		if l[i] == 0 || l[i] > lim.MaxComputeWorkGroupSize[i] {
			return nil, fmt.Errorf("workgroup size %v is outside the device's maximum %v", l, lim.MaxComputeWorkGroupSize)
		}
	}
	if total > uint64(info.MaxWorkgroupInvocations) {
		return nil, fmt.Errorf("workgroup size %v has %d invocations; the device allows %d", l, total, info.MaxWorkgroupInvocations)
	}
	if sz := uint32(s.SubgroupSize); sz != 0 {
		if l[0]%sz != 0 {
			return nil, fmt.Errorf("workgroup size x = %d is not a multiple of the required subgroup size %d (full subgroups)", l[0], sz)
		}
		if total/uint64(sz) > uint64(d.phys.maxSubgroup) {
			return nil, fmt.Errorf("workgroup size %v needs %d subgroups of %d; the device allows %d", l, total/uint64(sz), sz, d.phys.maxSubgroup)
		}
	}
	return words, nil
}

func (p *Pipeline) build(words []uint32) error {
	d, s := p.d, p.spec
	module, err := d.shaderModule(words)
	if err != nil {
		return err
	}
	defer vk.DestroyShaderModule(d.h, module, nil)

	binds := make([]vk.DescriptorSetLayoutBinding, s.Bindings)
	for i := range binds {
		binds[i] = vk.DescriptorSetLayoutBinding{
			Binding:         uint32(i),
			DescriptorType:  vk.DescriptorTypeStorageBuffer,
			DescriptorCount: 1,
			StageFlags:      vk.ShaderStageFlags(vk.ShaderStageComputeBit),
		}
	}
	sli := &vk.DescriptorSetLayoutCreateInfo{
		SType:        vk.StructureTypeDescriptorSetLayoutCreateInfo,
		BindingCount: uint32(len(binds)),
		PBindings:    binds,
	}
	// Handles come back through locals: cgo refuses a pointer into a struct
	// that holds Go pointers, such as Pipeline.
	var setLayout vk.DescriptorSetLayout
	if err := check("creating descriptor set layout", int32(paused(func() vk.Result { return vk.CreateDescriptorSetLayout(d.h, sli, nil, &setLayout) }))); err != nil {
		return err
	}
	p.setLayout = setLayout
	p.setLayoutID = uint64(uintptr(unsafe.Pointer(p.setLayout)))
	li := &vk.PipelineLayoutCreateInfo{
		SType:          vk.StructureTypePipelineLayoutCreateInfo,
		SetLayoutCount: 1,
		PSetLayouts:    []vk.DescriptorSetLayout{p.setLayout},
	}
	if s.PushSize > 0 {
		li.PushConstantRangeCount = 1
		li.PPushConstantRanges = []vk.PushConstantRange{{
			StageFlags: vk.ShaderStageFlags(vk.ShaderStageComputeBit),
			Size:       uint32(s.PushSize),
		}}
	}
	var layout vk.PipelineLayout
	if err := check("creating pipeline layout", int32(paused(func() vk.Result { return vk.CreatePipelineLayout(d.h, li, nil, &layout) }))); err != nil {
		return err
	}
	p.layout = layout
	p.layoutID = uint64(uintptr(unsafe.Pointer(p.layout)))
	return p.createPipeline(module)
}

func (d *Device) shaderModule(words []uint32) (vk.ShaderModule, error) {
	var m vk.ShaderModule
	ci := &vk.ShaderModuleCreateInfo{
		SType:    vk.StructureTypeShaderModuleCreateInfo,
		CodeSize: uint(4 * len(words)),
		PCode:    words,
	}
	err := check("creating shader module", int32(paused(func() vk.Result { return vk.CreateShaderModule(d.h, ci, nil, &m) })))
	return m, err
}

func (p *Pipeline) createPipeline(module vk.ShaderModule) error {
	d, s := p.d, p.spec
	var pin runtime.Pinner
	defer pin.Unpin()
	stage := vk.PipelineShaderStageCreateInfo{
		SType:  vk.StructureTypePipelineShaderStageCreateInfo,
		Stage:  vk.ShaderStageComputeBit,
		Module: module,
		PName:  cstr("main"),
	}
	if len(s.Spec) > 0 {
		entries := make([]vk.SpecializationMapEntry, len(s.Spec))
		for i := range entries {
			entries[i] = vk.SpecializationMapEntry{ConstantID: uint32(i), Offset: uint32(4 * i), Size: 4}
		}
		pin.Pin(&p.spec.Spec[0])
		stage.PSpecializationInfo = []vk.SpecializationInfo{{
			MapEntryCount: uint32(len(entries)),
			PMapEntries:   entries,
			DataSize:      uint(4 * len(s.Spec)),
			PData:         unsafe.Pointer(&p.spec.Spec[0]),
		}}
	}
	if s.SubgroupSize != 0 {
		req := &pipelineShaderStageRequiredSubgroupSizeCreateInfo{
			sType:                stRequiredSubgroupSizeInfo,
			requiredSubgroupSize: uint32(s.SubgroupSize),
		}
		pin.Pin(req)
		stage.PNext = unsafe.Pointer(req)
		stage.Flags = 0x2 // VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT
	}
	ci := []vk.ComputePipelineCreateInfo{{
		SType:  vk.StructureTypeComputePipelineCreateInfo,
		Stage:  stage,
		Layout: p.layout,
	}}
	if d.info.PipelineStatistics {
		// Statistics only: the driver keeps a few counters per pipeline.
		// Internal representations (disassembly) would keep far more and
		// can slow compilation, so they stay off.
		ci[0].Flags = vk.PipelineCreateFlags(pipelineCreateCaptureStatistics)
	}
	pipes := make([]vk.Pipeline, 1)
	if err := check("creating compute pipeline", int32(paused(func() vk.Result { return vk.CreateComputePipelines(d.h, d.cache.h, 1, ci, nil, pipes) }))); err != nil {
		return err
	}
	p.h = pipes[0]
	p.id = uint64(uintptr(unsafe.Pointer(p.h)))
	return nil
}

func (p *Pipeline) release() {
	d := p.d
	if p.h != vk.NullPipeline {
		vk.DestroyPipeline(d.h, p.h, nil)
	}
	if p.layout != vk.NullPipelineLayout {
		vk.DestroyPipelineLayout(d.h, p.layout, nil)
	}
	if p.setLayout != vk.NullDescriptorSetLayout {
		vk.DestroyDescriptorSetLayout(d.h, p.setLayout, nil)
	}
}
