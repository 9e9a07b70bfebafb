// Package vkheader exposes the layouts of Vulkan structs as the system
// header vulkan/vulkan_core.h declares them, so that vk's tests can check
// its Go mirrors field by field. Only tests import it: building it needs the
// Vulkan headers (libvulkan-dev), which the vk package itself does not.
package vkheader

/*
#cgo CFLAGS: -I${SRCDIR}/../..
#include <vulkan/vulkan_core.h>
#include "cvk.h"

// Headers older than 1.3.255 lack VK_KHR_cooperative_matrix. The vk package
// then relies on cvk.h's transcription of the specification, so that is
// what its Go mirrors are checked against (CoopMatFromHeader says which);
// where the header has the extension, cvk.h is checked against it too.
#ifdef VK_KHR_cooperative_matrix
enum { coopmat_from_header = 1 };
#else
enum { coopmat_from_header = 0 };
typedef vkr_physical_device_cooperative_matrix_features VkPhysicalDeviceCooperativeMatrixFeaturesKHR;
typedef vkr_physical_device_cooperative_matrix_properties VkPhysicalDeviceCooperativeMatrixPropertiesKHR;
typedef vkr_cooperative_matrix_properties VkCooperativeMatrixPropertiesKHR;
#define VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR VKR_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR
#define VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR VKR_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR
#define VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_PROPERTIES_KHR VKR_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_PROPERTIES_KHR
#define VK_COMPONENT_TYPE_FLOAT16_KHR VKR_COMPONENT_TYPE_FLOAT16
#define VK_COMPONENT_TYPE_FLOAT32_KHR VKR_COMPONENT_TYPE_FLOAT32
#define VK_COMPONENT_TYPE_FLOAT64_KHR VKR_COMPONENT_TYPE_FLOAT64
#define VK_COMPONENT_TYPE_SINT8_KHR VKR_COMPONENT_TYPE_SINT8
#define VK_COMPONENT_TYPE_SINT16_KHR VKR_COMPONENT_TYPE_SINT16
#define VK_COMPONENT_TYPE_SINT32_KHR VKR_COMPONENT_TYPE_SINT32
#define VK_COMPONENT_TYPE_SINT64_KHR VKR_COMPONENT_TYPE_SINT64
#define VK_COMPONENT_TYPE_UINT8_KHR VKR_COMPONENT_TYPE_UINT8
#define VK_COMPONENT_TYPE_UINT16_KHR VKR_COMPONENT_TYPE_UINT16
#define VK_COMPONENT_TYPE_UINT32_KHR VKR_COMPONENT_TYPE_UINT32
#define VK_COMPONENT_TYPE_UINT64_KHR VKR_COMPONENT_TYPE_UINT64
#define VK_SCOPE_DEVICE_KHR VKR_SCOPE_DEVICE
#define VK_SCOPE_WORKGROUP_KHR VKR_SCOPE_WORKGROUP
#define VK_SCOPE_SUBGROUP_KHR VKR_SCOPE_SUBGROUP
#define VK_SCOPE_QUEUE_FAMILY_KHR VKR_SCOPE_QUEUE_FAMILY
#endif
// Component types of later extensions (1.4.311 and on).
#ifndef VK_KHR_shader_bfloat16
#define VK_COMPONENT_TYPE_BFLOAT16_KHR VKR_COMPONENT_TYPE_BFLOAT16
#endif
#ifndef VK_EXT_shader_float8
#define VK_COMPONENT_TYPE_FLOAT8_E4M3_EXT VKR_COMPONENT_TYPE_FLOAT8_E4M3
#define VK_COMPONENT_TYPE_FLOAT8_E5M2_EXT VKR_COMPONENT_TYPE_FLOAT8_E5M2
#endif
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
	"VkPhysicalDeviceVulkanMemoryModelFeatures":               reflect.TypeFor[C.VkPhysicalDeviceVulkanMemoryModelFeatures](),
	"VkPhysicalDeviceCooperativeMatrixFeaturesKHR":            reflect.TypeFor[C.VkPhysicalDeviceCooperativeMatrixFeaturesKHR](),
	"VkPhysicalDeviceCooperativeMatrixPropertiesKHR":          reflect.TypeFor[C.VkPhysicalDeviceCooperativeMatrixPropertiesKHR](),
	"VkCooperativeMatrixPropertiesKHR":                        reflect.TypeFor[C.VkCooperativeMatrixPropertiesKHR](),
}

// CVK maps cvk.h's own transcriptions of structs the header may lack to
// the Vulkan names they stand for.
var CVK = map[string]reflect.Type{
	"VkPhysicalDeviceCooperativeMatrixFeaturesKHR":   reflect.TypeFor[C.vkr_physical_device_cooperative_matrix_features](),
	"VkPhysicalDeviceCooperativeMatrixPropertiesKHR": reflect.TypeFor[C.vkr_physical_device_cooperative_matrix_properties](),
	"VkCooperativeMatrixPropertiesKHR":               reflect.TypeFor[C.vkr_cooperative_matrix_properties](),
}

// CoopMatFromHeader says whether vulkan_core.h declares
// VK_KHR_cooperative_matrix; without it, Structs, StructureTypes and
// Constants hold cvk.h's transcription under the Vulkan names.
var CoopMatFromHeader = C.coopmat_from_header != 0

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
	"VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES":                C.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES,
	"VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR":             C.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR,
	"VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR":                           C.VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR,
	"VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_PROPERTIES_KHR":           C.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_PROPERTIES_KHR,
}

// Values of other enums and flags the mirrors use.
var Constants = map[string]int64{
	"VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR":       C.VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR,
	"VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR":  C.VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR,
	"VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR":   C.VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR,
	"VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR":  C.VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR,
	"VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_FLOAT64_KHR": C.VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_FLOAT64_KHR,
	"VK_SHADER_STAGE_COMPUTE_BIT":                         C.VK_SHADER_STAGE_COMPUTE_BIT,
	"VK_COMPONENT_TYPE_FLOAT16_KHR":                       C.VK_COMPONENT_TYPE_FLOAT16_KHR,
	"VK_COMPONENT_TYPE_FLOAT32_KHR":                       C.VK_COMPONENT_TYPE_FLOAT32_KHR,
	"VK_COMPONENT_TYPE_FLOAT64_KHR":                       C.VK_COMPONENT_TYPE_FLOAT64_KHR,
	"VK_COMPONENT_TYPE_SINT8_KHR":                         C.VK_COMPONENT_TYPE_SINT8_KHR,
	"VK_COMPONENT_TYPE_SINT16_KHR":                        C.VK_COMPONENT_TYPE_SINT16_KHR,
	"VK_COMPONENT_TYPE_SINT32_KHR":                        C.VK_COMPONENT_TYPE_SINT32_KHR,
	"VK_COMPONENT_TYPE_SINT64_KHR":                        C.VK_COMPONENT_TYPE_SINT64_KHR,
	"VK_COMPONENT_TYPE_UINT8_KHR":                         C.VK_COMPONENT_TYPE_UINT8_KHR,
	"VK_COMPONENT_TYPE_UINT16_KHR":                        C.VK_COMPONENT_TYPE_UINT16_KHR,
	"VK_COMPONENT_TYPE_UINT32_KHR":                        C.VK_COMPONENT_TYPE_UINT32_KHR,
	"VK_COMPONENT_TYPE_UINT64_KHR":                        C.VK_COMPONENT_TYPE_UINT64_KHR,
	"VK_COMPONENT_TYPE_BFLOAT16_KHR":                      C.VK_COMPONENT_TYPE_BFLOAT16_KHR,
	"VK_COMPONENT_TYPE_FLOAT8_E4M3_EXT":                   C.VK_COMPONENT_TYPE_FLOAT8_E4M3_EXT,
	"VK_COMPONENT_TYPE_FLOAT8_E5M2_EXT":                   C.VK_COMPONENT_TYPE_FLOAT8_E5M2_EXT,
	"VK_SCOPE_DEVICE_KHR":                                 C.VK_SCOPE_DEVICE_KHR,
	"VK_SCOPE_WORKGROUP_KHR":                              C.VK_SCOPE_WORKGROUP_KHR,
	"VK_SCOPE_SUBGROUP_KHR":                               C.VK_SCOPE_SUBGROUP_KHR,
	"VK_SCOPE_QUEUE_FAMILY_KHR":                           C.VK_SCOPE_QUEUE_FAMILY_KHR,
}
