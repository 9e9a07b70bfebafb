package vk

/*
#include "cvk.h"
*/
import "C"

import (
	"fmt"
	"math"
	"runtime"
	"strings"
	"unsafe"

	vk "github.com/vulkan-go/vulkan"
)

// Heap is one memory heap of a device.
type Heap struct {
	Size, Budget uint64
	DeviceLocal  bool
}

// DeviceInfo describes a physical device.
type DeviceInfo struct {
	Index                                          int // position in Devices()
	Name, Driver, DriverInfo                       string
	VendorID, DeviceID                             uint32
	Type                                           string // "discrete", "integrated", "virtual", "cpu", "other"
	APIVersion                                     string // the device's Vulkan version, "1.3.230"
	DriverVersion                                  uint32 // packed as the vendor chooses; Report decodes it
	UUID                                           [16]byte
	SubgroupSize, MinSubgroupSize, MaxSubgroupSize int
	SizeControl                                    bool // a compute shader may require a subgroup size (with full subgroups)
	SharedMemory                                   int  // maxComputeSharedMemorySize in bytes
	MaxWorkgroupInvocations                        int
	MaxWorkgroupCount                              [3]uint32
	MaxAllocation, MaxStorageRange                 uint64 // bytes, clamped to the largest device-local heap
	Heaps                                          []Heap
	FP16, Int8, Storage16, Storage8, IntegerDot    bool
	// DotAccelerated: the packed 4x8-bit signed dot product (IntegerDot's
	// core) is a native instruction, not an emulation the driver expands.
	DotAccelerated bool
	// DotMixedAccelerated: so is the mixed-signedness one (signed by
	// unsigned bytes). On AMD it first appears with RDNA3, the generation
	// that brought matrix instructions (WMMA), which the cooperative-matrix
	// policy uses to tell matrix cores from an emulated extension.
	DotMixedAccelerated bool
	// VulkanMemoryModel: the vulkanMemoryModel feature is on (the
	// cooperative-matrix shaders' memory scopes and semantics need it).
	VulkanMemoryModel bool
	// CoopMatrix: compute shaders can use cooperative matrices: the device
	// has VK_KHR_cooperative_matrix (NVIDIA's older VK_NV_cooperative_matrix
	// does not count), its cooperativeMatrix feature is on and
	// cooperativeMatrixSupportedStages lists the compute stage. Open then
	// enables the extension and the feature.
	CoopMatrix bool
	// CoopMatShapes are the fragment shapes and types the device runs
	// (vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR), in the driver's
	// order; never empty when CoopMatrix is true, always when it is false.
	CoopMatShapes []CoopMatShape
	// CoopMatrixOff says why CoopMatrix is false on a device that has
	// VK_KHR_cooperative_matrix ("" otherwise), phrased to follow the
	// device's name: its feature is off, compute is not among its stages,
	// it lists no shapes, or the validation layer Open runs under predates
	// the extension (it can check neither the device setup nor the
	// shaders, so the extension is not used).
	CoopMatrixOff   string
	ComputeUnits    int     // AMD shader core or NVIDIA SM count; 0 if unknown
	TimestampPeriod float32 // nanoseconds per timestamp tick; 0 when the driver reports no usable period
	TimestampValid  bool    // the compute queue writes timestamps
	// PipelineStatistics: VK_KHR_pipeline_executable_properties is on, so
	// pipelines are compiled with their statistics captured and
	// Pipeline.Statistics reports them (registers, instructions, spills,
	// named as the driver chooses).
	PipelineStatistics bool
	// QueueFamilies are the device's queue families in the driver's order;
	// Queue is the one Open creates its queue on (-1 when none runs
	// compute) and QueueReason says why (the queue policy, queue.go).
	QueueFamilies []QueueFamily
	Queue         int
	QueueReason   string
	// Unusable says why Open refuses the device ("" when it accepts it): a
	// Vulkan version below 1.2, a missing entry point, no compute queue, a
	// compute limit of zero.
	Unusable string
	// CannotRun says why a device that Open accepts cannot run work ("" when
	// it can): it reports no memory, or a memory limit of zero. A driver's
	// null device is such a device: RADV's "Null hardware" (selected with
	// RADV_FORCE_FAMILY) compiles pipelines, so their statistics can be
	// read, but has no memory and executes nothing. NewBuffer and
	// NewSequence fail on it with this reason.
	CannotRun string
}

// CoopMatShape is one cooperative-matrix configuration a device offers
// (VkCooperativeMatrixPropertiesKHR): Result = A (M×K) × B (K×N) + C (M×N).
type CoopMatShape struct {
	M, N, K int
	// A, B, C and Result are the component types: "f16", "f32", "f64",
	// "s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64", "bf16", "e4m3",
	// "e5m2", or "type N" for a value this package does not know.
	A, B, C, Result string
	// Saturating: the multiply-add of this entry must saturate
	// (saturatingAccumulation); integer entries come with and without.
	Saturating bool
	// Scope is the scope the matrices live in: "subgroup", "workgroup",
	// "device", "queue-family" or "scope N".
	Scope string
}

// String renders the shape as "16x16x16 f16*f16+f32->f32", with " sat" for
// a saturating entry; the scope is left to the caller (CoopMatSummary).
func (s CoopMatShape) String() string {
	str := fmt.Sprintf("%dx%dx%d %s*%s+%s->%s", s.M, s.N, s.K, s.A, s.B, s.C, s.Result)
	if s.Saturating {
		str += " sat"
	}
	return str
}

// CoopMatSummary renders shapes on one line, comma-separated, with their
// scope in parentheses: once at the end when every shape shares it, else
// after each shape.
func CoopMatSummary(shapes []CoopMatShape) string {
	if len(shapes) == 0 {
		return "none"
	}
	same := true
	for _, s := range shapes {
		same = same && s.Scope == shapes[0].Scope
	}
	parts := make([]string, len(shapes))
	for i, s := range shapes {
		parts[i] = s.String()
		if !same {
			parts[i] += " (" + s.Scope + ")"
		}
	}
	out := strings.Join(parts, ", ")
	if same {
		out += " (" + shapes[0].Scope + ")"
	}
	return out
}

// resultName names a VkResult.
func resultName(r int32) string {
	if n, ok := resultNames[r]; ok {
		return n
	}
	return fmt.Sprintf("VkResult %d", r)
}

func componentName(t uint32) string {
	if n, ok := componentTypes[t]; ok {
		return n
	}
	return fmt.Sprintf("type %d", t)
}

func scopeName(s uint32) string {
	if n, ok := scopes[s]; ok {
		return n
	}
	return fmt.Sprintf("scope %d", s)
}

// physical is what querying one physical device yields: the public report
// plus what Open needs to create a logical device on it.
type physical struct {
	h      vk.PhysicalDevice
	id     uint64
	inst   uint64 // the instance, for looking up entry points
	info   DeviceInfo
	api    uint32 // min(device, instance) version
	exts   map[string]bool
	family uint32 // the queue family Open uses: info.Queue when that is not -1
	// timestampBits is the family's timestampValidBits.
	timestampBits uint32
	// lacks names an entry point the driver does not provide, which leaves
	// the device unqueried and unusable.
	lacks error

	limits      vk.PhysicalDeviceLimits
	cacheUUID   [16]byte
	mem         physicalDeviceMemoryProperties
	feat        *featureSet // supported
	sizeStages  uint32      // requiredSubgroupSizeStages
	maxSubgroup int         // maxComputeWorkgroupSubgroups
	coopStages  uint32      // cooperativeMatrixSupportedStages
	// coopWithheld says why cooperative matrices are neither queried nor
	// used although the device has the extension ("" when they may be).
	coopWithheld string
}

// featureSet is the chain of feature structs queried from a device and
// passed back, possibly trimmed, to create it. It is its own allocation
// holding nothing but the chain, because cgo only accepts a pointer whose
// whole object has its Go pointers pinned.
type featureSet struct {
	features  physicalDeviceFeatures2
	storage16 physicalDevice16BitStorageFeatures
	storage8  physicalDevice8BitStorageFeatures
	f16i8     physicalDeviceShaderFloat16Int8Features
	sizeCtl   physicalDeviceSubgroupSizeControlFeatures
	dot       physicalDeviceShaderIntegerDotProductFeatures
	extTypes  physicalDeviceShaderSubgroupExtendedTypesFeatures
	execProps physicalDevicePipelineExecutablePropertiesFeatures
	memModel  physicalDeviceVulkanMemoryModelFeatures
	coopMat   physicalDeviceCooperativeMatrixFeatures
}

// minVersion is the oldest device API version Open accepts: the shaders are
// SPIR-V 1.5 (glslc --target-env=vulkan1.2).
var minVersion = vk.MakeVersion(1, 2, 0)

const shaderStageCompute = 0x20

// extPipelineExecutableProperties lets a pipeline report its compiled
// statistics, such as the registers a kernel needs per lane, which decide
// how many workgroups fit on a compute unit.
const extPipelineExecutableProperties = "VK_KHR_pipeline_executable_properties"

// extCoopMatrix gives compute shaders matrix-multiply-accumulate on
// fragments spread over a subgroup: the matrix cores of RDNA3+, NVIDIA since
// Turing and Intel Arc.
const extCoopMatrix = "VK_KHR_cooperative_matrix"

// coopMatLayerVersion is the header version that introduced
// VK_KHR_cooperative_matrix (1.3.255). A validation layer built before it
// knows neither the extension's structs nor SPV_KHR_cooperative_matrix:
// it reports every use as an error (and, unable to specialize such a
// shader, misreads its workgroup size), so nothing about the extension can
// be validated with it.
var coopMatLayerVersion = vk.MakeVersion(1, 3, 255)

// useCoopMat says whether the cooperative-matrix structs may be queried
// and the extension used: the device has it and no validation layer too
// old for it is watching.
func (p *physical) useCoopMat() bool { return p.exts[extCoopMatrix] && p.coopWithheld == "" }

func versionString(v uint32) string {
	return fmt.Sprintf("%d.%d.%d", v>>22, (v>>12)&0x3ff, v&0xfff)
}

func typeName(t vk.PhysicalDeviceType) string {
	switch t {
	case vk.PhysicalDeviceTypeDiscreteGpu:
		return "discrete"
	case vk.PhysicalDeviceTypeIntegratedGpu:
		return "integrated"
	case vk.PhysicalDeviceTypeVirtualGpu:
		return "virtual"
	case vk.PhysicalDeviceTypeCpu:
		return "cpu"
	}
	return "other"
}

// Devices lists every physical device with its properties; it creates no
// logical device.
func Devices() ([]DeviceInfo, error) {
	in, err := sharedInstance(false, false)
	if err != nil {
		return nil, err
	}
	phys, err := in.physicalDevices()
	if err != nil {
		return nil, err
	}
	infos := make([]DeviceInfo, len(phys))
	for i, p := range phys {
		infos[i] = p.info
	}
	return infos, nil
}

func (in *instance) physicalDevices() ([]*physical, error) {
	var n uint32
	if err := check("enumerating physical devices", int32(vk.EnumeratePhysicalDevices(in.h, &n, nil))); err != nil {
		return nil, err
	}
	hs := make([]vk.PhysicalDevice, n)
	if err := check("enumerating physical devices", int32(vk.EnumeratePhysicalDevices(in.h, &n, hs))); err != nil {
		return nil, err
	}
	out := make([]*physical, 0, n)
	for i, h := range hs[:n] {
		p, err := in.queryPhysical(h, i)
		if err != nil {
			return nil, fmt.Errorf("device %d: %w", i, err)
		}
		out = append(out, p)
	}
	return out, nil
}

func deviceExtensions(h vk.PhysicalDevice) (map[string]bool, error) {
	var n uint32
	if err := check("enumerating device extensions", int32(paused(func() vk.Result { return vk.EnumerateDeviceExtensionProperties(h, "", &n, nil) }))); err != nil {
		return nil, err
	}
	props := make([]vk.ExtensionProperties, n)
	if err := check("enumerating device extensions", int32(paused(func() vk.Result { return vk.EnumerateDeviceExtensionProperties(h, "", &n, props) }))); err != nil {
		return nil, err
	}
	return extensionSet(props[:n]), nil
}

// chain links pNext structs in order and pins each, so the C side may follow
// the pointers; the caller unpins after the call.
func chain(pin *runtime.Pinner, head *unsafe.Pointer, links ...unsafe.Pointer) {
	for _, l := range links {
		pin.Pin(l)
		*head = l
		// Every mirror starts with sType then pNext.
		head = (*unsafe.Pointer)(unsafe.Add(l, unsafe.Offsetof(physicalDeviceFeatures2{}.pNext)))
	}
}

func (in *instance) queryPhysical(h vk.PhysicalDevice, index int) (*physical, error) {
	p := &physical{h: h, id: uint64(uintptr(unsafe.Pointer(h))), inst: in.id}
	var props vk.PhysicalDeviceProperties
	vk.GetPhysicalDeviceProperties(h, &props)
	props.Deref()
	props.Limits.Deref()
	p.limits = props.Limits
	p.cacheUUID = props.PipelineCacheUUID
	p.api = min(props.ApiVersion, in.version)
	exts, err := deviceExtensions(h)
	if err != nil {
		return nil, err
	}
	p.exts = exts
	if exts[extCoopMatrix] && in.layerVersion != 0 && in.layerVersion < coopMatLayerVersion {
		p.coopWithheld = fmt.Sprintf("runs under a validation layer (%s) that predates VK_KHR_cooperative_matrix (1.3.255) and cannot check it",
			versionString(in.layerVersion))
	}

	info := &p.info
	info.Index = index
	info.Name = vk.ToString(props.DeviceName[:])
	info.VendorID, info.DeviceID = props.VendorID, props.DeviceID
	info.Type = typeName(props.DeviceType)
	info.APIVersion = versionString(props.ApiVersion)
	info.DriverVersion = props.DriverVersion
	info.SharedMemory = int(p.limits.MaxComputeSharedMemorySize)
	info.MaxWorkgroupInvocations = int(p.limits.MaxComputeWorkGroupInvocations)
	info.MaxWorkgroupCount = p.limits.MaxComputeWorkGroupCount
	info.MaxStorageRange = uint64(p.limits.MaxStorageBufferRange)
	info.TimestampPeriod = p.limits.TimestampPeriod

	p.queryQueues()
	v11 := p.api >= vk.MakeVersion(1, 1, 0)
	fns, err := physicalFunctions(func(name string) unsafe.Pointer { return proc(p.inst, name) }, v11)
	if err != nil {
		p.lacks = err
		info.Unusable = unusable(p)
		return p, nil
	}
	maxAlloc := uint64(1) << 62 // Vulkan 1.0 reports no allocation limit
	if v11 {
		maxAlloc = p.queryExtended(fns)
	}
	memProblem := p.queryMemory(fns, v11)
	var largest uint64
	for _, hp := range info.Heaps {
		if hp.DeviceLocal && hp.Size > largest {
			largest = hp.Size
		}
	}
	// Some drivers report INT64_MAX or more than the card has.
	info.MaxAllocation = min(maxAlloc, largest)
	info.MaxStorageRange = min(info.MaxStorageRange, largest)
	info.Unusable = unusable(p)
	info.CannotRun = runProblem(memProblem, info)
	return p, nil
}

// physicalFns are the physical-device queries the binding lacks.
type physicalFns struct {
	properties2, features2, memory2, memory unsafe.Pointer
}

// physicalFunctions looks up the queries queryPhysical calls through C
// trampolines: the Vulkan 1.1 ones where the device has 1.1, else the 1.0
// memory query. A missing one is an error naming it, since calling a nil
// entry point from C is a segfault.
func physicalFunctions(get func(name string) unsafe.Pointer, v11 bool) (physicalFns, error) {
	var f physicalFns
	if !v11 {
		return f, resolve(get, []entry{{&f.memory, "vkGetPhysicalDeviceMemoryProperties"}})
	}
	return f, resolve(get, []entry{
		{&f.properties2, "vkGetPhysicalDeviceProperties2"},
		{&f.features2, "vkGetPhysicalDeviceFeatures2"},
		{&f.memory2, "vkGetPhysicalDeviceMemoryProperties2"},
	})
}

// queryQueues lists the queue families and applies the queue policy.
func (p *physical) queryQueues() {
	var n uint32
	vk.GetPhysicalDeviceQueueFamilyProperties(p.h, &n, nil)
	fams := make([]vk.QueueFamilyProperties, n)
	WithoutGC(func() { vk.GetPhysicalDeviceQueueFamilyProperties(p.h, &n, fams) })
	info := &p.info
	info.QueueFamilies = make([]QueueFamily, n)
	for i := range fams[:n] {
		fams[i].Deref()
		info.QueueFamilies[i] = QueueFamily{Flags: uint32(fams[i].QueueFlags), Count: fams[i].QueueCount, TimestampBits: fams[i].TimestampValidBits}
	}
	// A period that is not a positive number (RADV's null device reports
	// +Inf) would turn every tick count into nonsense.
	if period := float64(info.TimestampPeriod); !(period > 0) || math.IsInf(period, 1) {
		info.TimestampPeriod = 0
	}
	info.Queue, info.QueueReason = chooseQueueFamily(info.VendorID, info.QueueFamilies)
	if info.Queue < 0 {
		return
	}
	p.family = uint32(info.Queue)
	p.timestampBits = info.QueueFamilies[info.Queue].TimestampBits
	info.TimestampValid = p.timestampBits > 0 && info.TimestampPeriod > 0
}

// queryExtended fills what needs the Vulkan 1.1 query functions: IDs,
// subgroups, driver, memory heaps and budgets, and the optional features. It
// returns maxMemoryAllocationSize.
func (p *physical) queryExtended(fns physicalFns) uint64 {
	info := &p.info
	var pin runtime.Pinner
	defer pin.Unpin()

	id := &physicalDeviceIDProperties{sType: stIDProperties}
	sub := &physicalDeviceSubgroupProperties{sType: stSubgroupProperties}
	m3 := &physicalDeviceMaintenance3Properties{sType: stMaintenance3Properties}
	drv := &physicalDeviceDriverProperties{sType: stDriverProperties}
	sc := &physicalDeviceSubgroupSizeControlProperties{sType: stSubgroupSizeControlProperties}
	amd := &physicalDeviceShaderCorePropertiesAMD{sType: stShaderCorePropertiesAMD}
	nv := &physicalDeviceShaderSMBuiltinsPropertiesNV{sType: stSMBuiltinsPropertiesNV}
	dot := &physicalDeviceShaderIntegerDotProductProperties{sType: stIntegerDotProductProperties}
	props2 := &physicalDeviceProperties2{sType: stProperties2}
	links := []unsafe.Pointer{unsafe.Pointer(id), unsafe.Pointer(sub), unsafe.Pointer(m3)}
	v12, v13 := p.api >= minVersion, p.api >= vk.MakeVersion(1, 3, 0)
	hasDrv := v12 || p.exts["VK_KHR_driver_properties"]
	hasSC := v13 || p.exts["VK_EXT_subgroup_size_control"]
	if hasDrv {
		links = append(links, unsafe.Pointer(drv))
	}
	if hasSC {
		links = append(links, unsafe.Pointer(sc))
	}
	hasDot := v13 || p.exts["VK_KHR_shader_integer_dot_product"]
	if hasDot {
		links = append(links, unsafe.Pointer(dot))
	}
	coop := &physicalDeviceCooperativeMatrixProperties{sType: stCooperativeMatrixDeviceProperties}
	if p.useCoopMat() {
		links = append(links, unsafe.Pointer(coop))
	}
	if p.exts["VK_AMD_shader_core_properties"] {
		links = append(links, unsafe.Pointer(amd))
	}
	if p.exts["VK_NV_shader_sm_builtins"] {
		links = append(links, unsafe.Pointer(nv))
	}
	pin.Pin(props2)
	chain(&pin, &props2.pNext, links...)
	C.vkr_physical_device_query(fns.properties2, C.uint64_t(p.id), unsafe.Pointer(props2))

	info.UUID = id.deviceUUID
	info.SubgroupSize = int(sub.subgroupSize)
	info.MinSubgroupSize, info.MaxSubgroupSize = info.SubgroupSize, info.SubgroupSize
	if hasDrv {
		info.Driver = cString(drv.driverName[:])
		info.DriverInfo = cString(drv.driverInfo[:])
	}
	if hasSC {
		info.MinSubgroupSize, info.MaxSubgroupSize = int(sc.minSubgroupSize), int(sc.maxSubgroupSize)
		p.sizeStages, p.maxSubgroup = sc.requiredSubgroupSizeStages, int(sc.maxComputeWorkgroupSubgroups)
	}
	info.DotAccelerated = hasDot && dot.integerDotProduct4x8BitPackedSignedAccelerated != 0
	info.DotMixedAccelerated = hasDot && dot.integerDotProduct4x8BitPackedMixedSignednessAccelerated != 0
	p.coopStages = coop.cooperativeMatrixSupportedStages
	switch {
	case p.exts["VK_AMD_shader_core_properties"]:
		info.ComputeUnits = int(amd.shaderEngineCount * amd.shaderArraysPerEngineCount * amd.computeUnitsPerShaderArray)
	case p.exts["VK_NV_shader_sm_builtins"]:
		info.ComputeUnits = int(nv.shaderSMCount)
	}

	p.queryFeatures(fns, v12, v13)
	return m3.maxMemoryAllocationSize
}

// queryMemory reads the heaps and memory types, with budgets where
// VK_EXT_memory_budget is present (it needs the Vulkan 1.1 query). A device
// whose memory properties are unusable is left with none, and the reason
// returned.
//
// The budget is asked for only once the device has reported usable heaps:
// a device without memory has no budget to report, and RADV's null device
// crashes computing one. Mesa 25.0's null winsys knows no VRAM for chips
// missing from its table (navi33, gfx1151, gfx1201 …), so RADV takes its
// APU budget path, which calls the winsys's query_value, a NULL function
// pointer there (docs/VULKAN.md).
func (p *physical) queryMemory(fns physicalFns, v11 bool) string {
	var pin runtime.Pinner
	defer pin.Unpin()
	mp2 := &physicalDeviceMemoryProperties2{sType: stMemoryProperties2}
	if v11 {
		pin.Pin(mp2)
		C.vkr_physical_device_query(fns.memory2, C.uint64_t(p.id), unsafe.Pointer(mp2))
		p.mem = mp2.memoryProperties
	} else {
		C.vkr_physical_device_query(fns.memory, C.uint64_t(p.id), unsafe.Pointer(&p.mem))
	}
	if problem := memoryProblem(&p.mem); problem != "" {
		p.mem = physicalDeviceMemoryProperties{}
		return problem
	}
	p.info.Heaps = make([]Heap, p.mem.memoryHeapCount)
	for i := range p.info.Heaps {
		hp := p.mem.memoryHeaps[i]
		p.info.Heaps[i] = Heap{Size: hp.size, Budget: hp.size, DeviceLocal: hp.flags&uint32(vk.MemoryHeapDeviceLocalBit) != 0}
	}
	if !v11 || !p.exts["VK_EXT_memory_budget"] {
		return ""
	}
	budget := &physicalDeviceMemoryBudgetProperties{sType: stMemoryBudgetProperties}
	chain(&pin, &mp2.pNext, unsafe.Pointer(budget))
	C.vkr_physical_device_query(fns.memory2, C.uint64_t(p.id), unsafe.Pointer(mp2))
	for i := range p.info.Heaps {
		p.info.Heaps[i].Budget = budget.heapBudget[i]
	}
	return ""
}

// queryFeatures reads the optional features Open enables.
func (p *physical) queryFeatures(fns physicalFns, v12, v13 bool) {
	var pin runtime.Pinner
	defer pin.Unpin()
	f := &featureSet{
		features:  physicalDeviceFeatures2{sType: stFeatures2},
		storage16: physicalDevice16BitStorageFeatures{sType: st16BitStorageFeatures},
		storage8:  physicalDevice8BitStorageFeatures{sType: st8BitStorageFeatures},
		f16i8:     physicalDeviceShaderFloat16Int8Features{sType: stFloat16Int8Features},
		sizeCtl:   physicalDeviceSubgroupSizeControlFeatures{sType: stSubgroupSizeControlFeatures},
		dot:       physicalDeviceShaderIntegerDotProductFeatures{sType: stIntegerDotProductFeatures},
		extTypes:  physicalDeviceShaderSubgroupExtendedTypesFeatures{sType: stSubgroupExtendedTypesFeatures},
		execProps: physicalDevicePipelineExecutablePropertiesFeatures{sType: stPipelineExecutablePropertiesFeatures},
		memModel:  physicalDeviceVulkanMemoryModelFeatures{sType: stVulkanMemoryModelFeatures},
		coopMat:   physicalDeviceCooperativeMatrixFeatures{sType: stCooperativeMatrixFeatures},
	}
	f.link(&pin, p.exts, v12, v13, p.exts[extPipelineExecutableProperties], p.useCoopMat())
	C.vkr_physical_device_query(fns.features2, C.uint64_t(p.id), unsafe.Pointer(&f.features))
	f.unlink()
	p.feat = f

	info := &p.info
	info.Storage16 = f.storage16.storageBuffer16BitAccess != 0
	info.Storage8 = f.storage8.storageBuffer8BitAccess != 0
	info.FP16, info.Int8 = f.f16i8.shaderFloat16 != 0, f.f16i8.shaderInt8 != 0
	info.IntegerDot = f.dot.shaderIntegerDotProduct != 0
	info.SizeControl = f.sizeCtl.subgroupSizeControl != 0 && f.sizeCtl.computeFullSubgroups != 0 &&
		p.sizeStages&shaderStageCompute != 0
	info.PipelineStatistics = p.exts[extPipelineExecutableProperties] && f.execProps.pipelineExecutableInfo != 0
	info.VulkanMemoryModel = f.memModel.vulkanMemoryModel != 0
	switch {
	case !p.exts[extCoopMatrix]:
	case p.coopWithheld != "":
		info.CoopMatrixOff = p.coopWithheld
	case f.coopMat.cooperativeMatrix == 0:
		info.CoopMatrixOff = "has VK_KHR_cooperative_matrix with its cooperativeMatrix feature off"
	case p.coopStages&shaderStageCompute == 0:
		info.CoopMatrixOff = "has VK_KHR_cooperative_matrix, but not for compute shaders (cooperativeMatrixSupportedStages)"
	default:
		info.CoopMatShapes, info.CoopMatrixOff = p.queryCoopMatShapes()
		info.CoopMatrix = len(info.CoopMatShapes) > 0
	}
}

// queryCoopMatShapes lists the device's cooperative-matrix configurations,
// or says why there are none: the entry point is missing, the query fails
// or lists nothing. The extension is then of no use.
func (p *physical) queryCoopMatShapes() ([]CoopMatShape, string) {
	const name = "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR"
	fn := proc(p.inst, name)
	if fn == nil {
		return nil, "lacks the entry point " + name
	}
	var n C.uint32_t
	if r := C.vkr_cooperative_matrix_properties_query(fn, C.uint64_t(p.id), &n, nil); r != 0 {
		return nil, fmt.Sprintf("failed to list its cooperative-matrix shapes (%s: %s)", name, resultName(int32(r)))
	}
	if n == 0 {
		return nil, "lists no cooperative-matrix shapes"
	}
	props := make([]cooperativeMatrixProperties, n)
	for i := range props {
		props[i].sType = stCooperativeMatrixProperties
	}
	// VK_INCOMPLETE (5) still fills the first n entries.
	if r := C.vkr_cooperative_matrix_properties_query(fn, C.uint64_t(p.id), &n, unsafe.Pointer(&props[0])); r != 0 && r != 5 {
		return nil, fmt.Sprintf("failed to list its cooperative-matrix shapes (%s: %s)", name, resultName(int32(r)))
	}
	shapes := make([]CoopMatShape, 0, n)
	for _, c := range props[:n] {
		shapes = append(shapes, CoopMatShape{
			M: int(c.MSize), N: int(c.NSize), K: int(c.KSize),
			A: componentName(c.AType), B: componentName(c.BType), C: componentName(c.CType), Result: componentName(c.ResultType),
			Saturating: c.saturatingAccumulation != 0, Scope: scopeName(c.scope),
		})
	}
	if len(shapes) == 0 {
		return nil, "lists no cooperative-matrix shapes"
	}
	return shapes, ""
}

// link pins f and chains the feature structs valid for the device: each
// only where its version or extension is present, since the validation
// layer rejects others. execProps and coopMat chain the pipeline-executable
// and cooperative-matrix structs, which are only valid where their
// extension is enabled: on the query when the device offers it, on
// creation when Open enables it.
func (f *featureSet) link(pin *runtime.Pinner, exts map[string]bool, v12, v13, execProps, coopMat bool) {
	links := []unsafe.Pointer{unsafe.Pointer(&f.storage16)}
	if v12 || exts["VK_KHR_8bit_storage"] {
		links = append(links, unsafe.Pointer(&f.storage8))
	}
	if v12 || exts["VK_KHR_shader_float16_int8"] {
		links = append(links, unsafe.Pointer(&f.f16i8))
	}
	if v12 || exts["VK_KHR_shader_subgroup_extended_types"] {
		links = append(links, unsafe.Pointer(&f.extTypes))
	}
	if v13 || exts["VK_EXT_subgroup_size_control"] {
		links = append(links, unsafe.Pointer(&f.sizeCtl))
	}
	if v13 || exts["VK_KHR_shader_integer_dot_product"] {
		links = append(links, unsafe.Pointer(&f.dot))
	}
	if v12 || exts["VK_KHR_vulkan_memory_model"] {
		links = append(links, unsafe.Pointer(&f.memModel))
	}
	if execProps {
		links = append(links, unsafe.Pointer(&f.execProps))
	}
	if coopMat {
		links = append(links, unsafe.Pointer(&f.coopMat))
	}
	pin.Pin(f)
	chain(pin, &f.features.pNext, links...)
}

// unlink clears the pNext pointers so a kept set holds no stale chain.
func (f *featureSet) unlink() {
	f.features.pNext = nil
	f.storage16.pNext, f.storage8.pNext, f.f16i8.pNext = nil, nil, nil
	f.sizeCtl.pNext, f.dot.pNext, f.extTypes.pNext = nil, nil, nil
	f.execProps.pNext, f.memModel.pNext, f.coopMat.pNext = nil, nil, nil
}

// cString converts a fixed-size NUL-terminated C char array.
func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
