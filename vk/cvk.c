// Trampolines between Go and Vulkan entry points fetched at run time. Handles
// arrive as uint64_t and are cast back to the pointers the entry points take.
#include "cvk.h"
#include "_cgo_export.h"

#include <string.h>

#ifdef _WIN32
#include <stdio.h>
#include <windows.h>
#else
#include <dlfcn.h>
#endif

// Non-dispatchable handles are pointers only on 64-bit targets; the uint64_t
// plumbing below relies on that.
_Static_assert(sizeof(void*) == 8, "vkinfer's Vulkan runtime needs a 64-bit platform");

#define H(h) ((void*)(uintptr_t)(h))

void* vkr_load(const char* lib, char* err, size_t errlen) {
#ifdef _WIN32
	HMODULE m = LoadLibraryA(lib);
	if (m == NULL) {
		snprintf(err, errlen, "LoadLibrary failed (error %lu)", GetLastError());
		return NULL;
	}
	void* f = (void*)GetProcAddress(m, "vkGetInstanceProcAddr");
#else
	void* m = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (m == NULL) {
		const char* e = dlerror();
		strncpy(err, e ? e : "dlopen failed", errlen - 1);
		err[errlen - 1] = 0;
		return NULL;
	}
	void* f = dlsym(m, "vkGetInstanceProcAddr");
#endif
	if (f == NULL) {
		strncpy(err, "the library has no vkGetInstanceProcAddr", errlen - 1);
		err[errlen - 1] = 0;
	}
	return f;
}

typedef void* (*pfn_gipa)(void*, const char*);

void* vkr_instance_proc(void* gipa, uint64_t instance, const char* name) {
	return ((pfn_gipa)gipa)(H(instance), name);
}

void* vkr_device_proc(void* gdpa, uint64_t device, const char* name) {
	return ((pfn_gipa)gdpa)(H(device), name);
}

int32_t vkr_enumerate_instance_version(void* fn, uint32_t* version) {
	return ((int32_t (*)(uint32_t*))fn)(version);
}

void vkr_physical_device_query(void* fn, uint64_t pd, void* out) {
	((void (*)(void*, void*))fn)(H(pd), out);
}

int32_t vkr_cooperative_matrix_properties_query(void* fn, uint64_t pd, uint32_t* count, void* out) {
	return ((vkr_pfn_cooperative_matrix_properties)fn)(H(pd), count, (vkr_cooperative_matrix_properties*)out);
}

int32_t vkr_create_messenger(void* fn, uint64_t instance, const void* info, uint64_t* out) {
	return ((int32_t (*)(void*, const void*, const void*, uint64_t*))fn)(H(instance), info, NULL, out);
}

void vkr_destroy_messenger(void* fn, uint64_t instance, uint64_t messenger) {
	((void (*)(void*, void*, const void*))fn)(H(instance), H(messenger), NULL);
}

static uint32_t debug_callback(uint32_t severity, uint32_t types, const void* data, void* user) {
	(void)types;
	goDebugMessage((uintptr_t)user, severity, (void*)data);
	return 0; // VK_FALSE: never abort the call that triggered the message
}

void* vkr_debug_callback(void) { return (void*)debug_callback; }

int32_t vkr_dispatch(const vkr_fns* f, uint64_t device, uint64_t cmd,
	const void* allocInfo, uint64_t* set, const void* write,
	uint64_t pipeline, uint64_t layout, uint32_t pushSize, const void* push,
	uint32_t x, uint32_t y, uint32_t z, uint64_t qpool, uint32_t query) {
	const uint32_t compute = 1;        // VK_PIPELINE_BIND_POINT_COMPUTE
	const uint32_t computeStage = 0x20; // VK_SHADER_STAGE_COMPUTE_BIT
	if (allocInfo != NULL) {
		int32_t r = ((int32_t (*)(void*, const void*, uint64_t*))f->allocateDescriptorSets)(H(device), allocInfo, set);
		if (r != 0) {
			return r;
		}
		((void (*)(void*, uint32_t, const void*, uint32_t, const void*))f->updateDescriptorSets)(H(device), 1, write, 0, NULL);
	}
	((void (*)(void*, uint32_t, void*))f->cmdBindPipeline)(H(cmd), compute, H(pipeline));
	if (allocInfo != NULL) {
		((void (*)(void*, uint32_t, void*, uint32_t, uint32_t, const uint64_t*, uint32_t, const uint32_t*))f->cmdBindDescriptorSets)(
			H(cmd), compute, H(layout), 0, 1, set, 0, NULL);
	}
	if (pushSize > 0) {
		((void (*)(void*, void*, uint32_t, uint32_t, uint32_t, const void*))f->cmdPushConstants)(
			H(cmd), H(layout), computeStage, 0, pushSize, push);
	}
	void (*stamp)(void*, uint32_t, void*, uint32_t) = (void (*)(void*, uint32_t, void*, uint32_t))f->cmdWriteTimestamp;
	if (qpool != 0) {
		// COMPUTE_SHADER, not TOP_OF_PIPE: a top-of-pipe stamp is taken as soon
		// as the command is reached, before the barrier lets the dispatch
		// start, which charged each op with the tail of the one before it.
		stamp(H(cmd), 0x800, H(qpool), query); // VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT
	}
	((void (*)(void*, uint32_t, uint32_t, uint32_t))f->cmdDispatch)(H(cmd), x, y, z);
	if (qpool != 0) {
		stamp(H(cmd), 0x2000, H(qpool), query + 1); // VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT
	}
	return 0;
}

void vkr_barrier(const vkr_fns* f, uint64_t cmd, uint32_t srcStages, uint32_t dstStages, const void* memoryBarrier) {
	((void (*)(void*, uint32_t, uint32_t, uint32_t, uint32_t, const void*, uint32_t, const void*, uint32_t, const void*))
		f->cmdPipelineBarrier)(H(cmd), srcStages, dstStages, 0, 1, memoryBarrier, 0, NULL, 0, NULL);
}

void vkr_copy(const vkr_fns* f, uint64_t cmd, uint64_t src, uint64_t dst, const void* region) {
	((void (*)(void*, void*, void*, uint32_t, const void*))f->cmdCopyBuffer)(H(cmd), H(src), H(dst), 1, region);
}

void vkr_reset_queries(const vkr_fns* f, uint64_t cmd, uint64_t pool, uint32_t first, uint32_t count) {
	((void (*)(void*, void*, uint32_t, uint32_t))f->cmdResetQueryPool)(H(cmd), H(pool), first, count);
}

int32_t vkr_begin(const vkr_fns* f, uint64_t cmd, const void* beginInfo) {
	return ((int32_t (*)(void*, const void*))f->beginCommandBuffer)(H(cmd), beginInfo);
}

int32_t vkr_end(const vkr_fns* f, uint64_t cmd) {
	return ((int32_t (*)(void*))f->endCommandBuffer)(H(cmd));
}

int32_t vkr_submit_wait(const vkr_fns* f, uint64_t device, uint64_t queue, const void* submit, uint64_t* fence) {
	int32_t r = ((int32_t (*)(void*, uint32_t, const void*, void*))f->queueSubmit)(H(queue), 1, submit, H(*fence));
	if (r != 0) {
		return r;
	}
	r = ((int32_t (*)(void*, uint32_t, const uint64_t*, uint32_t, uint64_t))f->waitForFences)(H(device), 1, fence, 1, UINT64_MAX);
	if (r != 0) {
		return r;
	}
	return ((int32_t (*)(void*, uint32_t, const uint64_t*))f->resetFences)(H(device), 1, fence);
}

int32_t vkr_query_results(const vkr_fns* f, uint64_t device, uint64_t pool, uint32_t first, uint32_t count,
	size_t size, void* data, uint64_t stride, uint32_t flags) {
	return ((int32_t (*)(void*, void*, uint32_t, uint32_t, size_t, void*, uint64_t, uint32_t))f->getQueryPoolResults)(
		H(device), H(pool), first, count, size, data, stride, flags);
}

int32_t vkr_pipeline_executables(const vkr_fns* f, uint64_t device, const void* info, uint32_t* count, void* out) {
	return ((int32_t (*)(void*, const void*, uint32_t*, void*))f->getPipelineExecutableProperties)(H(device), info, count, out);
}

int32_t vkr_pipeline_statistics(const vkr_fns* f, uint64_t device, const void* info, uint32_t* count, void* out) {
	return ((int32_t (*)(void*, const void*, uint32_t*, void*))f->getPipelineExecutableStatistics)(H(device), info, count, out);
}
