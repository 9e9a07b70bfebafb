package vk

import "unsafe"

// Go mirrors of the Vulkan structs that github.com/vulkan-go/vulkan (1.1.88
// headers) lacks, or that the hot path fills in C memory without the
// binding's per-call allocations. Field names equal the C names so that
// mirror_test.go can check every size and offset against vulkan_core.h.
// Structs whose contents we never read keep them as an opaque byte array of
// the header's size.

// sType values (VkStructureType).
const (
	stSubmitInfo                    = 4
	stDescriptorSetAllocateInfo     = 34
	stWriteDescriptorSet            = 35
	stCommandBufferBeginInfo        = 42
	stMemoryBarrier                 = 46
	stFeatures2                     = 1000059000
	stProperties2                   = 1000059001
	stMemoryProperties2             = 1000059006
	stIDProperties                  = 1000071004
	stFloat16Int8Features           = 1000082000
	st16BitStorageFeatures          = 1000083000
	stSubgroupProperties            = 1000094000
	stDebugUtilsMessengerCreateInfo = 1000128004
	stValidationFeatures            = 1000247000
	stSMBuiltinsPropertiesNV        = 1000154001
	stMaintenance3Properties        = 1000168000
	stSubgroupExtendedTypesFeatures = 1000175000
	st8BitStorageFeatures           = 1000177000
	stShaderCorePropertiesAMD       = 1000185000
	stDriverProperties              = 1000196000
	stSubgroupSizeControlProperties = 1000225000
	stRequiredSubgroupSizeInfo      = 1000225001
	stSubgroupSizeControlFeatures   = 1000225002
	stMemoryBudgetProperties        = 1000237000
	stIntegerDotProductFeatures     = 1000280000
	stIntegerDotProductProperties   = 1000280001
	// VK_KHR_pipeline_executable_properties
	stPipelineExecutablePropertiesFeatures = 1000269000
	stPipelineInfo                         = 1000269001
	stPipelineExecutableProperties         = 1000269002
	stPipelineExecutableInfo               = 1000269003
	stPipelineExecutableStatistic          = 1000269004
	stVulkanMemoryModelFeatures            = 1000211000
	// VK_KHR_cooperative_matrix (absent from older headers: cvk.h has
	// the specification's values)
	stCooperativeMatrixFeatures         = 1000506000
	stCooperativeMatrixProperties       = 1000506001
	stCooperativeMatrixDeviceProperties = 1000506002
)

// Sizes of the structs kept opaque; mirror_test.go checks them.
const (
	sizeofPhysicalDeviceFeatures   = 220
	sizeofPhysicalDeviceProperties = 824
)

// Word indexes into VkPhysicalDeviceFeatures (55 VkBool32 in a row).
const (
	featShaderInt64 = 40
	featShaderInt16 = 41
)

type physicalDeviceFeatures2 struct {
	sType    uint32
	pNext    unsafe.Pointer
	features [sizeofPhysicalDeviceFeatures / 4]uint32
}

type physicalDeviceProperties2 struct {
	sType      uint32
	pNext      unsafe.Pointer
	properties [sizeofPhysicalDeviceProperties]byte // read through the binding instead
}

type memoryType struct {
	propertyFlags uint32
	heapIndex     uint32
}

type memoryHeap struct {
	size  uint64
	flags uint32
}

type physicalDeviceMemoryProperties struct {
	memoryTypeCount uint32
	memoryTypes     [32]memoryType
	memoryHeapCount uint32
	memoryHeaps     [16]memoryHeap
}

type physicalDeviceMemoryProperties2 struct {
	sType            uint32
	pNext            unsafe.Pointer
	memoryProperties physicalDeviceMemoryProperties
}

type physicalDeviceMemoryBudgetProperties struct {
	sType      uint32
	pNext      unsafe.Pointer
	heapBudget [16]uint64
	heapUsage  [16]uint64
}

type physicalDeviceIDProperties struct {
	sType           uint32
	pNext           unsafe.Pointer
	deviceUUID      [16]byte
	driverUUID      [16]byte
	deviceLUID      [8]byte
	deviceNodeMask  uint32
	deviceLUIDValid uint32
}

type physicalDeviceSubgroupProperties struct {
	sType                     uint32
	pNext                     unsafe.Pointer
	subgroupSize              uint32
	supportedStages           uint32
	supportedOperations       uint32
	quadOperationsInAllStages uint32
}

type physicalDeviceMaintenance3Properties struct {
	sType                   uint32
	pNext                   unsafe.Pointer
	maxPerSetDescriptors    uint32
	maxMemoryAllocationSize uint64
}

type physicalDeviceDriverProperties struct {
	sType              uint32
	pNext              unsafe.Pointer
	driverID           uint32
	driverName         [256]byte
	driverInfo         [256]byte
	conformanceVersion [4]uint8
}

type physicalDeviceSubgroupSizeControlProperties struct {
	sType                        uint32
	pNext                        unsafe.Pointer
	minSubgroupSize              uint32
	maxSubgroupSize              uint32
	maxComputeWorkgroupSubgroups uint32
	requiredSubgroupSizeStages   uint32
}

type physicalDeviceShaderCorePropertiesAMD struct {
	sType                      uint32
	pNext                      unsafe.Pointer
	shaderEngineCount          uint32
	shaderArraysPerEngineCount uint32
	computeUnitsPerShaderArray uint32
	simdPerComputeUnit         uint32
	wavefrontsPerSimd          uint32
	wavefrontSize              uint32
	sgprsPerSimd               uint32
	minSgprAllocation          uint32
	maxSgprAllocation          uint32
	sgprAllocationGranularity  uint32
	vgprsPerSimd               uint32
	minVgprAllocation          uint32
	maxVgprAllocation          uint32
	vgprAllocationGranularity  uint32
}

type physicalDeviceShaderSMBuiltinsPropertiesNV struct {
	sType            uint32
	pNext            unsafe.Pointer
	shaderSMCount    uint32
	shaderWarpsPerSM uint32
}

type physicalDevice16BitStorageFeatures struct {
	sType                              uint32
	pNext                              unsafe.Pointer
	storageBuffer16BitAccess           uint32
	uniformAndStorageBuffer16BitAccess uint32
	storagePushConstant16              uint32
	storageInputOutput16               uint32
}

type physicalDevice8BitStorageFeatures struct {
	sType                             uint32
	pNext                             unsafe.Pointer
	storageBuffer8BitAccess           uint32
	uniformAndStorageBuffer8BitAccess uint32
	storagePushConstant8              uint32
}

type physicalDeviceShaderFloat16Int8Features struct {
	sType         uint32
	pNext         unsafe.Pointer
	shaderFloat16 uint32
	shaderInt8    uint32
}

type physicalDeviceSubgroupSizeControlFeatures struct {
	sType                uint32
	pNext                unsafe.Pointer
	subgroupSizeControl  uint32
	computeFullSubgroups uint32
}

type physicalDeviceShaderIntegerDotProductFeatures struct {
	sType                   uint32
	pNext                   unsafe.Pointer
	shaderIntegerDotProduct uint32
}

// physicalDeviceShaderIntegerDotProductProperties says which dot products
// run as native instructions rather than emulated.
type physicalDeviceShaderIntegerDotProductProperties struct {
	sType                                                                         uint32
	pNext                                                                         unsafe.Pointer
	integerDotProduct8BitUnsignedAccelerated                                      uint32
	integerDotProduct8BitSignedAccelerated                                        uint32
	integerDotProduct8BitMixedSignednessAccelerated                               uint32
	integerDotProduct4x8BitPackedUnsignedAccelerated                              uint32
	integerDotProduct4x8BitPackedSignedAccelerated                                uint32
	integerDotProduct4x8BitPackedMixedSignednessAccelerated                       uint32
	integerDotProduct16BitUnsignedAccelerated                                     uint32
	integerDotProduct16BitSignedAccelerated                                       uint32
	integerDotProduct16BitMixedSignednessAccelerated                              uint32
	integerDotProduct32BitUnsignedAccelerated                                     uint32
	integerDotProduct32BitSignedAccelerated                                       uint32
	integerDotProduct32BitMixedSignednessAccelerated                              uint32
	integerDotProduct64BitUnsignedAccelerated                                     uint32
	integerDotProduct64BitSignedAccelerated                                       uint32
	integerDotProduct64BitMixedSignednessAccelerated                              uint32
	integerDotProductAccumulatingSaturating8BitUnsignedAccelerated                uint32
	integerDotProductAccumulatingSaturating8BitSignedAccelerated                  uint32
	integerDotProductAccumulatingSaturating8BitMixedSignednessAccelerated         uint32
	integerDotProductAccumulatingSaturating4x8BitPackedUnsignedAccelerated        uint32
	integerDotProductAccumulatingSaturating4x8BitPackedSignedAccelerated          uint32
	integerDotProductAccumulatingSaturating4x8BitPackedMixedSignednessAccelerated uint32
	integerDotProductAccumulatingSaturating16BitUnsignedAccelerated               uint32
	integerDotProductAccumulatingSaturating16BitSignedAccelerated                 uint32
	integerDotProductAccumulatingSaturating16BitMixedSignednessAccelerated        uint32
	integerDotProductAccumulatingSaturating32BitUnsignedAccelerated               uint32
	integerDotProductAccumulatingSaturating32BitSignedAccelerated                 uint32
	integerDotProductAccumulatingSaturating32BitMixedSignednessAccelerated        uint32
	integerDotProductAccumulatingSaturating64BitUnsignedAccelerated               uint32
	integerDotProductAccumulatingSaturating64BitSignedAccelerated                 uint32
	integerDotProductAccumulatingSaturating64BitMixedSignednessAccelerated        uint32
}

type physicalDeviceVulkanMemoryModelFeatures struct {
	sType                                         uint32
	pNext                                         unsafe.Pointer
	vulkanMemoryModel                             uint32
	vulkanMemoryModelDeviceScope                  uint32
	vulkanMemoryModelAvailabilityVisibilityChains uint32
}

// The VK_KHR_cooperative_matrix mirrors follow cvk.h's transcription
// (vkr_physical_device_cooperative_matrix_features and the rest), which
// mirror_test.go checks against vulkan_core.h where the header has them.

type physicalDeviceCooperativeMatrixFeatures struct {
	sType                               uint32
	pNext                               unsafe.Pointer
	cooperativeMatrix                   uint32
	cooperativeMatrixRobustBufferAccess uint32
}

type physicalDeviceCooperativeMatrixProperties struct {
	sType                            uint32
	pNext                            unsafe.Pointer
	cooperativeMatrixSupportedStages uint32
}

type cooperativeMatrixProperties struct {
	sType                  uint32
	pNext                  unsafe.Pointer
	MSize                  uint32
	NSize                  uint32
	KSize                  uint32
	AType                  uint32
	BType                  uint32
	CType                  uint32
	ResultType             uint32
	saturatingAccumulation uint32
	scope                  uint32
}

// componentTypes names VkComponentTypeKHR values as CoopMatShape does.
var componentTypes = map[uint32]string{
	0: "f16", 1: "f32", 2: "f64", 3: "s8", 4: "s16", 5: "s32", 6: "s64",
	7: "u8", 8: "u16", 9: "u32", 10: "u64",
	1000141000: "bf16", 1000491002: "e4m3", 1000491003: "e5m2",
}

// scopes names VkScopeKHR values.
var scopes = map[uint32]string{1: "device", 2: "workgroup", 3: "subgroup", 5: "queue-family"}

type physicalDeviceShaderSubgroupExtendedTypesFeatures struct {
	sType                       uint32
	pNext                       unsafe.Pointer
	shaderSubgroupExtendedTypes uint32
}

type physicalDevicePipelineExecutablePropertiesFeatures struct {
	sType                  uint32
	pNext                  unsafe.Pointer
	pipelineExecutableInfo uint32
}

// VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR
const pipelineCreateCaptureStatistics = 0x40

// pipelineInfo (VkPipelineInfoKHR) names the pipeline whose executables
// vkGetPipelineExecutablePropertiesKHR lists.
type pipelineInfo struct {
	sType    uint32
	pNext    unsafe.Pointer
	pipeline uint64
}

type pipelineExecutableProperties struct {
	sType        uint32
	pNext        unsafe.Pointer
	stages       uint32
	name         [256]byte
	description  [256]byte
	subgroupSize uint32
}

type pipelineExecutableInfo struct {
	sType           uint32
	pNext           unsafe.Pointer
	pipeline        uint64
	executableIndex uint32
}

// pipelineExecutableStatistic mirrors VkPipelineExecutableStatisticKHR; its
// value is a union of VkBool32, int64_t, uint64_t and double, kept as the
// raw 8 bytes (a uint64 gives the union's 8-byte alignment) and decoded by
// format.
type pipelineExecutableStatistic struct {
	sType       uint32
	pNext       unsafe.Pointer
	name        [256]byte
	description [256]byte
	format      uint32
	value       uint64
}

type pipelineShaderStageRequiredSubgroupSizeCreateInfo struct {
	sType                uint32
	pNext                unsafe.Pointer
	requiredSubgroupSize uint32
}

type debugUtilsMessengerCreateInfo struct {
	sType           uint32
	pNext           unsafe.Pointer
	flags           uint32
	messageSeverity uint32
	messageType     uint32
	pfnUserCallback unsafe.Pointer // a C function
	pUserData       uintptr        // a cgo.Handle, never a Go pointer
}

// validationFeatures (VkValidationFeaturesEXT) turns on optional checks of
// the validation layer.
type validationFeatures struct {
	sType                          uint32
	pNext                          unsafe.Pointer
	enabledValidationFeatureCount  uint32
	pEnabledValidationFeatures     unsafe.Pointer // *uint32
	disabledValidationFeatureCount uint32
	pDisabledValidationFeatures    unsafe.Pointer
}

// VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT and
// VK_VALIDATION_FEATURE_ENABLE_GPU_ASSISTED_EXT.
const (
	validationSync        = 4
	validationGPUAssisted = 0
)

type debugUtilsMessengerCallbackData struct {
	sType            uint32
	pNext            unsafe.Pointer
	flags            uint32
	pMessageIdName   *byte
	messageIdNumber  int32
	pMessage         *byte
	queueLabelCount  uint32
	pQueueLabels     unsafe.Pointer
	cmdBufLabelCount uint32
	pCmdBufLabels    unsafe.Pointer
	objectCount      uint32
	pObjects         unsafe.Pointer
}

// The hot-path structs below live in C memory owned by a Sequence.

type descriptorSetAllocateInfo struct {
	sType              uint32
	pNext              unsafe.Pointer
	descriptorPool     uint64
	descriptorSetCount uint32
	pSetLayouts        unsafe.Pointer
}

type descriptorBufferInfo struct {
	buffer uint64
	offset uint64
	_range uint64 // cgo spells the C field "range" this way
}

type writeDescriptorSet struct {
	sType            uint32
	pNext            unsafe.Pointer
	dstSet           uint64
	dstBinding       uint32
	dstArrayElement  uint32
	descriptorCount  uint32
	descriptorType   uint32
	pImageInfo       unsafe.Pointer
	pBufferInfo      unsafe.Pointer
	pTexelBufferView unsafe.Pointer
}

type memoryBarrier struct {
	sType         uint32
	pNext         unsafe.Pointer
	srcAccessMask uint32
	dstAccessMask uint32
}

type bufferCopy struct {
	srcOffset uint64
	dstOffset uint64
	size      uint64
}

type commandBufferBeginInfo struct {
	sType            uint32
	pNext            unsafe.Pointer
	flags            uint32
	pInheritanceInfo unsafe.Pointer
}

type submitInfo struct {
	sType                uint32
	pNext                unsafe.Pointer
	waitSemaphoreCount   uint32
	pWaitSemaphores      unsafe.Pointer
	pWaitDstStageMask    unsafe.Pointer
	commandBufferCount   uint32
	pCommandBuffers      unsafe.Pointer
	signalSemaphoreCount uint32
	pSignalSemaphores    unsafe.Pointer
}
