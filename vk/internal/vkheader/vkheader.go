// Package vkheader exposes the layouts of Vulkan structs as the system
// header vulkan/vulkan_core.h declares them, so that vk's tests can check
// its Go mirrors field by field. Only tests import it: building it needs the
// Vulkan headers (libvulkan-dev), which the vk package itself does not.
package vkheader

/*
#include <vulkan/vulkan_core.h>
*/
import "C"

import "reflect"

// Structs maps a C struct name to its cgo type; cgo keeps C field names,
// offsets and sizes (renaming Go keywords with a leading underscore).
var Structs = map[string]reflect.Type{
	"VkPhysicalDeviceFeatures":                                reflect.TypeFor[C.VkPhysicalDeviceFeatures](),
	"VkPhysicalDeviceFeatures2":                               reflect.TypeFor[C.VkPhysicalDeviceFeatures2](),
	"VkPhysicalDeviceProperties":                              reflect.TypeFor[C.VkPhysicalDeviceProperties](),
	"VkPhysicalDeviceProperties2":                             reflect.TypeFor[C.VkPhysicalDeviceProperties2](),
	"VkMemoryType":                                            reflect.TypeFor[C.VkMemoryType](),
	"VkMemoryHeap":                                            reflect.TypeFor[C.VkMemoryHeap](),
	"VkPhysicalDeviceMemoryProperties":                        reflect.TypeFor[C.VkPhysicalDeviceMemoryProperties](),
	"VkPhysicalDeviceMemoryProperties2":                       reflect.TypeFor[C.VkPhysicalDeviceMemoryProperties2](),
	"VkPhysicalDeviceMemoryBudgetPropertiesEXT":               reflect.TypeFor[C.VkPhysicalDeviceMemoryBudgetPropertiesEXT](),
	"VkPhysicalDeviceIDProperties":                            reflect.TypeFor[C.VkPhysicalDeviceIDProperties](),
	"VkPhysicalDeviceSubgroupProperties":                      reflect.TypeFor[C.VkPhysicalDeviceSubgroupProperties](),
	"VkPhysicalDeviceMaintenance3Properties":                  reflect.TypeFor[C.VkPhysicalDeviceMaintenance3Properties](),
	"VkPhysicalDeviceDriverProperties":                        reflect.TypeFor[C.VkPhysicalDeviceDriverProperties](),
	"VkPhysicalDeviceSubgroupSizeControlProperties":           reflect.TypeFor[C.VkPhysicalDeviceSubgroupSizeControlProperties](),
	"VkPhysicalDeviceShaderCorePropertiesAMD":                 reflect.TypeFor[C.VkPhysicalDeviceShaderCorePropertiesAMD](),
	"VkPhysicalDeviceShaderSMBuiltinsPropertiesNV":            reflect.TypeFor[C.VkPhysicalDeviceShaderSMBuiltinsPropertiesNV](),
	"VkPhysicalDevice16BitStorageFeatures":                    reflect.TypeFor[C.VkPhysicalDevice16BitStorageFeatures](),
	"VkPhysicalDevice8BitStorageFeatures":                     reflect.TypeFor[C.VkPhysicalDevice8BitStorageFeatures](),
	"VkPhysicalDeviceShaderFloat16Int8Features":               reflect.TypeFor[C.VkPhysicalDeviceShaderFloat16Int8Features](),
	"VkPhysicalDeviceSubgroupSizeControlFeatures":             reflect.TypeFor[C.VkPhysicalDeviceSubgroupSizeControlFeatures](),
	"VkPhysicalDeviceShaderIntegerDotProductFeatures":         reflect.TypeFor[C.VkPhysicalDeviceShaderIntegerDotProductFeatures](),
	"VkPhysicalDeviceShaderIntegerDotProductProperties":       reflect.TypeFor[C.VkPhysicalDeviceShaderIntegerDotProductProperties](),
	"VkPhysicalDeviceShaderSubgroupExtendedTypesFeatures":     reflect.TypeFor[C.VkPhysicalDeviceShaderSubgroupExtendedTypesFeatures](),
	"VkPipelineShaderStageRequiredSubgroupSizeCreateInfo":     reflect.TypeFor[C.VkPipelineShaderStageRequiredSubgroupSizeCreateInfo](),
	"VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR": reflect.TypeFor[C.VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR](),
	"VkPipelineInfoKHR":                                       reflect.TypeFor[C.VkPipelineInfoKHR](),
	"VkPipelineExecutablePropertiesKHR":                       reflect.TypeFor[C.VkPipelineExecutablePropertiesKHR](),
	"VkPipelineExecutableInfoKHR":                             reflect.TypeFor[C.VkPipelineExecutableInfoKHR](),
	"VkPipelineExecutableStatisticKHR":                        reflect.TypeFor[C.VkPipelineExecutableStatisticKHR](),
	"VkDebugUtilsMessengerCreateInfoEXT":                      reflect.TypeFor[C.VkDebugUtilsMessengerCreateInfoEXT](),
	"VkValidationFeaturesEXT":                                 reflect.TypeFor[C.VkValidationFeaturesEXT](),
	"VkDebugUtilsMessengerCallbackDataEXT":                    reflect.TypeFor[C.VkDebugUtilsMessengerCallbackDataEXT](),
	"VkDescriptorSetAllocateInfo":                             reflect.TypeFor[C.VkDescriptorSetAllocateInfo](),
	"VkDescriptorBufferInfo":                                  reflect.TypeFor[C.VkDescriptorBufferInfo](),
	"VkWriteDescriptorSet":                                    reflect.TypeFor[C.VkWriteDescriptorSet](),
	"VkMemoryBarrier":                                         reflect.TypeFor[C.VkMemoryBarrier](),
	"VkBufferCopy":                                            reflect.TypeFor[C.VkBufferCopy](),
	"VkCommandBufferBeginInfo":                                reflect.TypeFor[C.VkCommandBufferBeginInfo](),
	"VkSubmitInfo":                                            reflect.TypeFor[C.VkSubmitInfo](),
}

// StructureTypes maps VkStructureType names to their values.
var StructureTypes = map[string]int64{
	"VK_STRUCTURE_TYPE_SUBMIT_INFO":                                                 C.VK_STRUCTURE_TYPE_SUBMIT_INFO,
	"VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO":                                C.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
	"VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET":                                        C.VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
	"VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO":                                   C.VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
	"VK_STRUCTURE_TYPE_MEMORY_BARRIER":                                              C.VK_STRUCTURE_TYPE_MEMORY_BARRIER,
	"VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2":                                  C.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
	"VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2":                                C.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
	"VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2":                         C.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2,
	"VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES":                               C.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES,
	"VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES":                C.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES,
	"VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES":                      C.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES,
	"VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES":                         C.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES,
	"VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT":                       C.VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
	"VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_SM_BUILTINS_PROPERTIES_NV":            C.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_SM_BUILTINS_PROPERTIES_NV,
	"VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES":                    C.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES,
	"VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_SUBGROUP_EXTENDED_TYPES_FEATURES":     C.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_SUBGROUP_EXTENDED_TYPES_FEATURES,
	"VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_8BIT_STORAGE_FEATURES":                       C.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_8BIT_STORAGE_FEATURES,
	"VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_CORE_PROPERTIES_AMD":                  C.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_CORE_PROPERTIES_AMD,
	"VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES":                           C.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES,
	"VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES":            C.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES,
	"VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO":    C.VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO,
	"VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES":              C.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES,
	"VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT":                C.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT,
	"VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES":         C.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES,
	"VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_PROPERTIES":       C.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_PROPERTIES,
	"VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR": C.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR,
	"VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR":                                           C.VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR,
	"VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_PROPERTIES_KHR":                          C.VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_PROPERTIES_KHR,
	"VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR":                                C.VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR,
	"VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR":                           C.VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR,
}

// Values of other enums and flags the mirrors use.
var Constants = map[string]int64{
	"VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR":       C.VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR,
	"VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR":  C.VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR,
	"VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR":   C.VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR,
	"VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR":  C.VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR,
	"VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_FLOAT64_KHR": C.VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_FLOAT64_KHR,
}
