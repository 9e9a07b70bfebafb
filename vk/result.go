package vk

import "fmt"

// VkResult codes that the runtime tests for or is likely to see.
const (
	resSuccess            = 0
	resOutOfHostMemory    = -1
	resOutOfDeviceMemory  = -2
	resFragmentedPool     = -12
	resOutOfPoolMemory    = -1000069000
	resIncompatibleDriver = -9
)

var resultNames = map[int32]string{
	1:                     "VK_NOT_READY",
	2:                     "VK_TIMEOUT",
	5:                     "VK_INCOMPLETE",
	resOutOfHostMemory:    "VK_ERROR_OUT_OF_HOST_MEMORY",
	resOutOfDeviceMemory:  "VK_ERROR_OUT_OF_DEVICE_MEMORY",
	-3:                    "VK_ERROR_INITIALIZATION_FAILED",
	-4:                    "VK_ERROR_DEVICE_LOST",
	-5:                    "VK_ERROR_MEMORY_MAP_FAILED",
	-6:                    "VK_ERROR_LAYER_NOT_PRESENT",
	-7:                    "VK_ERROR_EXTENSION_NOT_PRESENT",
	-8:                    "VK_ERROR_FEATURE_NOT_PRESENT",
	resIncompatibleDriver: "VK_ERROR_INCOMPATIBLE_DRIVER",
	-10:                   "VK_ERROR_TOO_MANY_OBJECTS",
	-11:                   "VK_ERROR_FORMAT_NOT_SUPPORTED",
	resFragmentedPool:     "VK_ERROR_FRAGMENTED_POOL",
	-13:                   "VK_ERROR_UNKNOWN",
	resOutOfPoolMemory:    "VK_ERROR_OUT_OF_POOL_MEMORY",
	-1000161000:           "VK_ERROR_FRAGMENTATION",
	-1000257000:           "VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS",
}

// check turns a VkResult into an error naming the failed step; success and
// the non-error status codes give nil.
func check(step string, r int32) error {
	if r >= 0 {
		return nil
	}
	name, ok := resultNames[r]
	if !ok {
		name = fmt.Sprintf("VkResult %d", r)
	}
	return fmt.Errorf("vulkan: %s: %s", step, name)
}
