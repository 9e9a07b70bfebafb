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
