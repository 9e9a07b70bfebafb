// C side of the Vulkan runtime: the loader, the entry points the Go binding
// lacks, and the hot-path recording calls. It deliberately includes no Vulkan
// header, so the package builds without libvulkan-dev: every handle travels as
// uint64_t and every Vulkan struct is a Go mirror (mirror.go) passed as void*.
#ifndef VKINFER_CVK_H
#define VKINFER_CVK_H

#include <stddef.h>
#include <stdint.h>

// vkr_load opens the Vulkan loader library and returns its
// vkGetInstanceProcAddr, or NULL with a reason copied into err.
void* vkr_load(const char* lib, char* err, size_t errlen);

void* vkr_instance_proc(void* gipa, uint64_t instance, const char* name);
void* vkr_device_proc(void* gdpa, uint64_t device, const char* name);

int32_t vkr_enumerate_instance_version(void* fn, uint32_t* version);
// Covers vkGetPhysicalDeviceProperties2, Features2 and MemoryProperties2,
// which share the shape void(VkPhysicalDevice, T*).
void vkr_physical_device_query(void* fn, uint64_t pd, void* out);
// VK_KHR_cooperative_matrix, transcribed from the specification: the
// Vulkan headers this package may be built against (1.3.239 in Debian 12)
// predate it (1.3.255). Field names and order are the specification's; the
// Go mirrors in mirror.go follow these, and vk/internal/vkheader checks
// both against vulkan_core.h where the installed header has the extension.
enum {
	// VkStructureType
	VKR_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR = 1000506000,
	VKR_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR = 1000506001,
	VKR_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_PROPERTIES_KHR = 1000506002,
	// VkComponentTypeKHR (BFLOAT16 comes with VK_KHR_shader_bfloat16, the
	// FLOAT8 ones with VK_EXT_shader_float8)
	VKR_COMPONENT_TYPE_FLOAT16 = 0,
	VKR_COMPONENT_TYPE_FLOAT32 = 1,
	VKR_COMPONENT_TYPE_FLOAT64 = 2,
	VKR_COMPONENT_TYPE_SINT8 = 3,
	VKR_COMPONENT_TYPE_SINT16 = 4,
	VKR_COMPONENT_TYPE_SINT32 = 5,
	VKR_COMPONENT_TYPE_SINT64 = 6,
	VKR_COMPONENT_TYPE_UINT8 = 7,
	VKR_COMPONENT_TYPE_UINT16 = 8,
	VKR_COMPONENT_TYPE_UINT32 = 9,
	VKR_COMPONENT_TYPE_UINT64 = 10,
	VKR_COMPONENT_TYPE_BFLOAT16 = 1000141000,
	VKR_COMPONENT_TYPE_FLOAT8_E4M3 = 1000491002,
	VKR_COMPONENT_TYPE_FLOAT8_E5M2 = 1000491003,
	// VkScopeKHR
	VKR_SCOPE_DEVICE = 1,
	VKR_SCOPE_WORKGROUP = 2,
	VKR_SCOPE_SUBGROUP = 3,
	VKR_SCOPE_QUEUE_FAMILY = 5,
};

// VkPhysicalDeviceCooperativeMatrixFeaturesKHR
typedef struct vkr_physical_device_cooperative_matrix_features {
	uint32_t sType;
	void* pNext;
	uint32_t cooperativeMatrix;
	uint32_t cooperativeMatrixRobustBufferAccess;
} vkr_physical_device_cooperative_matrix_features;

// VkPhysicalDeviceCooperativeMatrixPropertiesKHR
typedef struct vkr_physical_device_cooperative_matrix_properties {
	uint32_t sType;
	void* pNext;
	uint32_t cooperativeMatrixSupportedStages; // VkShaderStageFlags
} vkr_physical_device_cooperative_matrix_properties;

// VkCooperativeMatrixPropertiesKHR: one fragment shape and its types.
typedef struct vkr_cooperative_matrix_properties {
	uint32_t sType;
	void* pNext;
	uint32_t MSize;
	uint32_t NSize;
	uint32_t KSize;
	uint32_t AType; // VkComponentTypeKHR
	uint32_t BType;
	uint32_t CType;
	uint32_t ResultType;
	uint32_t saturatingAccumulation; // VkBool32
	uint32_t scope;                  // VkScopeKHR
} vkr_cooperative_matrix_properties;

// PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR
typedef int32_t (*vkr_pfn_cooperative_matrix_properties)(void* physicalDevice, uint32_t* count,
	vkr_cooperative_matrix_properties* properties);

// vkr_cooperative_matrix_properties_query calls
// vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR: out is NULL (count
// only) or an array of *count vkr_cooperative_matrix_properties with sType
// set.
int32_t vkr_cooperative_matrix_properties_query(void* fn, uint64_t pd, uint32_t* count, void* out);

int32_t vkr_create_messenger(void* fn, uint64_t instance, const void* info, uint64_t* out);
void vkr_destroy_messenger(void* fn, uint64_t instance, uint64_t messenger);
// vkr_debug_callback is the PFN_vkDebugUtilsMessengerCallbackEXT that
// forwards every message to the exported Go function goDebugMessage.
void* vkr_debug_callback(void);

// vkr_fns holds device-level entry points from vkGetDeviceProcAddr so that
// recording skips the loader trampoline and the binding's C allocations.
typedef struct vkr_fns {
	void* allocateDescriptorSets;
	void* updateDescriptorSets;
	void* cmdBindPipeline;
	void* cmdBindDescriptorSets;
	void* cmdPushConstants;
	void* cmdDispatch;
	void* cmdPipelineBarrier;
	void* cmdCopyBuffer;
	void* cmdWriteTimestamp;
	void* cmdResetQueryPool;
	void* beginCommandBuffer;
	void* endCommandBuffer;
	void* queueSubmit;
	void* waitForFences;
	void* resetFences;
	void* getQueryPoolResults;
	// VK_KHR_pipeline_executable_properties; NULL unless the device has it
	// on (DeviceInfo.PipelineStatistics).
	void* getPipelineExecutableProperties;
	void* getPipelineExecutableStatistics;
} vkr_fns;

// vkr_dispatch allocates a descriptor set into *set (which is the dstSet field
// of write, so the update sees it), writes it, binds everything, pushes the
// constants and records the dispatch, bracketed by timestamps query and
// query+1 of qpool when qpool is not 0. A pipeline without bindings passes
// allocInfo NULL and skips the descriptor set. It returns the allocation's
// VkResult; nothing is recorded when that is an error.
int32_t vkr_dispatch(const vkr_fns* f, uint64_t device, uint64_t cmd,
	const void* allocInfo, uint64_t* set, const void* write,
	uint64_t pipeline, uint64_t layout, uint32_t pushSize, const void* push,
	uint32_t x, uint32_t y, uint32_t z, uint64_t qpool, uint32_t query);
void vkr_barrier(const vkr_fns* f, uint64_t cmd, uint32_t srcStages, uint32_t dstStages, const void* memoryBarrier);
void vkr_copy(const vkr_fns* f, uint64_t cmd, uint64_t src, uint64_t dst, const void* region);
void vkr_reset_queries(const vkr_fns* f, uint64_t cmd, uint64_t pool, uint32_t first, uint32_t count);
int32_t vkr_begin(const vkr_fns* f, uint64_t cmd, const void* beginInfo);
int32_t vkr_end(const vkr_fns* f, uint64_t cmd);
// vkr_submit_wait submits one VkSubmitInfo, waits for fence and resets it.
int32_t vkr_submit_wait(const vkr_fns* f, uint64_t device, uint64_t queue, const void* submit, uint64_t* fence);
// vkr_pipeline_executables and vkr_pipeline_statistics call
// vkGetPipelineExecutablePropertiesKHR (info a VkPipelineInfoKHR, out an
// array of *count VkPipelineExecutablePropertiesKHR or NULL) and
// vkGetPipelineExecutableStatisticsKHR (info a VkPipelineExecutableInfoKHR,
// out VkPipelineExecutableStatisticKHR).
int32_t vkr_pipeline_executables(const vkr_fns* f, uint64_t device, const void* info, uint32_t* count, void* out);
int32_t vkr_pipeline_statistics(const vkr_fns* f, uint64_t device, const void* info, uint32_t* count, void* out);
int32_t vkr_query_results(const vkr_fns* f, uint64_t device, uint64_t pool, uint32_t first, uint32_t count,
	size_t size, void* data, uint64_t stride, uint32_t flags);

#endif
