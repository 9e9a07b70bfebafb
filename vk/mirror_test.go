package vk

import (
	"reflect"
	"testing"

	"github.com/vkinfer/vkinfer/vk/internal/vkheader"
)

// TestMirrorLayouts checks every Go mirror against vulkan_core.h: same
// size, same fields by name, each at the same offset with the same size.
func TestMirrorLayouts(t *testing.T) {
	mirrors := map[string]reflect.Type{
		"VkPhysicalDeviceFeatures2":                               reflect.TypeFor[physicalDeviceFeatures2](),
		"VkPhysicalDeviceProperties2":                             reflect.TypeFor[physicalDeviceProperties2](),
		"VkMemoryType":                                            reflect.TypeFor[memoryType](),
		"VkMemoryHeap":                                            reflect.TypeFor[memoryHeap](),
		"VkPhysicalDeviceMemoryProperties":                        reflect.TypeFor[physicalDeviceMemoryProperties](),
		"VkPhysicalDeviceMemoryProperties2":                       reflect.TypeFor[physicalDeviceMemoryProperties2](),
		"VkPhysicalDeviceMemoryBudgetPropertiesEXT":               reflect.TypeFor[physicalDeviceMemoryBudgetProperties](),
		"VkPhysicalDeviceIDProperties":                            reflect.TypeFor[physicalDeviceIDProperties](),
		"VkPhysicalDeviceSubgroupProperties":                      reflect.TypeFor[physicalDeviceSubgroupProperties](),
		"VkPhysicalDeviceMaintenance3Properties":                  reflect.TypeFor[physicalDeviceMaintenance3Properties](),
		"VkPhysicalDeviceDriverProperties":                        reflect.TypeFor[physicalDeviceDriverProperties](),
		"VkPhysicalDeviceSubgroupSizeControlProperties":           reflect.TypeFor[physicalDeviceSubgroupSizeControlProperties](),
		"VkPhysicalDeviceShaderCorePropertiesAMD":                 reflect.TypeFor[physicalDeviceShaderCorePropertiesAMD](),
		"VkPhysicalDeviceShaderSMBuiltinsPropertiesNV":            reflect.TypeFor[physicalDeviceShaderSMBuiltinsPropertiesNV](),
		"VkPhysicalDevice16BitStorageFeatures":                    reflect.TypeFor[physicalDevice16BitStorageFeatures](),
		"VkPhysicalDevice8BitStorageFeatures":                     reflect.TypeFor[physicalDevice8BitStorageFeatures](),
		"VkPhysicalDeviceShaderFloat16Int8Features":               reflect.TypeFor[physicalDeviceShaderFloat16Int8Features](),
		"VkPhysicalDeviceSubgroupSizeControlFeatures":             reflect.TypeFor[physicalDeviceSubgroupSizeControlFeatures](),
		"VkPhysicalDeviceShaderIntegerDotProductFeatures":         reflect.TypeFor[physicalDeviceShaderIntegerDotProductFeatures](),
		"VkPhysicalDeviceShaderIntegerDotProductProperties":       reflect.TypeFor[physicalDeviceShaderIntegerDotProductProperties](),
		"VkPhysicalDeviceShaderSubgroupExtendedTypesFeatures":     reflect.TypeFor[physicalDeviceShaderSubgroupExtendedTypesFeatures](),
		"VkPipelineShaderStageRequiredSubgroupSizeCreateInfo":     reflect.TypeFor[pipelineShaderStageRequiredSubgroupSizeCreateInfo](),
		"VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR": reflect.TypeFor[physicalDevicePipelineExecutablePropertiesFeatures](),
		"VkPipelineInfoKHR":                                       reflect.TypeFor[pipelineInfo](),
		"VkPipelineExecutablePropertiesKHR":                       reflect.TypeFor[pipelineExecutableProperties](),
		"VkPipelineExecutableInfoKHR":                             reflect.TypeFor[pipelineExecutableInfo](),
		"VkPipelineExecutableStatisticKHR":                        reflect.TypeFor[pipelineExecutableStatistic](),
		"VkDebugUtilsMessengerCreateInfoEXT":                      reflect.TypeFor[debugUtilsMessengerCreateInfo](),
		"VkValidationFeaturesEXT":                                 reflect.TypeFor[validationFeatures](),
		"VkDebugUtilsMessengerCallbackDataEXT":                    reflect.TypeFor[debugUtilsMessengerCallbackData](),
		"VkDescriptorSetAllocateInfo":                             reflect.TypeFor[descriptorSetAllocateInfo](),
		"VkDescriptorBufferInfo":                                  reflect.TypeFor[descriptorBufferInfo](),
		"VkWriteDescriptorSet":                                    reflect.TypeFor[writeDescriptorSet](),
		"VkMemoryBarrier":                                         reflect.TypeFor[memoryBarrier](),
		"VkBufferCopy":                                            reflect.TypeFor[bufferCopy](),
		"VkCommandBufferBeginInfo":                                reflect.TypeFor[commandBufferBeginInfo](),
		"VkSubmitInfo":                                            reflect.TypeFor[submitInfo](),
		"VkPhysicalDeviceVulkanMemoryModelFeatures":               reflect.TypeFor[physicalDeviceVulkanMemoryModelFeatures](),
		"VkPhysicalDeviceCooperativeMatrixFeaturesKHR":            reflect.TypeFor[physicalDeviceCooperativeMatrixFeatures](),
		"VkPhysicalDeviceCooperativeMatrixPropertiesKHR":          reflect.TypeFor[physicalDeviceCooperativeMatrixProperties](),
		"VkCooperativeMatrixPropertiesKHR":                        reflect.TypeFor[cooperativeMatrixProperties](),
	}
	for name, g := range mirrors {
		c, ok := vkheader.Structs[name]
		if !ok {
			t.Errorf("%s: not in vkheader.Structs", name)
			continue
		}
		compareLayout(t, name, g, c)
	}
	// cvk.h's transcriptions of what older headers lack: checked against
	// vulkan_core.h where it has them (above, the Go mirrors were checked
	// against the header's, or against these).
	if !vkheader.CoopMatFromHeader {
		t.Logf("vulkan_core.h predates VK_KHR_cooperative_matrix: its mirrors are checked against cvk.h's transcription")
	}
	for name, c := range vkheader.CVK {
		compareLayout(t, "cvk.h "+name, c, vkheader.Structs[name])
	}
}

// compareLayout fails unless g has the size and alignment of c and each of
// its fields a field of c's name at the same offset with the same size.
func compareLayout(t *testing.T, name string, g, c reflect.Type) {
	t.Helper()
	if g.Size() != c.Size() || g.Align() != c.Align() {
		t.Errorf("%s: Go size/align %d/%d, C %d/%d", name, g.Size(), g.Align(), c.Size(), c.Align())
	}
	if namedFields(g) != namedFields(c) {
		t.Errorf("%s: Go has %d fields, C %d", name, namedFields(g), namedFields(c))
	}
	for i := 0; i < g.NumField(); i++ {
		gf := g.Field(i)
		if gf.Name == "_" {
			continue
		}
		cf, ok := c.FieldByName(gf.Name)
		switch {
		case !ok:
			t.Errorf("%s.%s: no such C field", name, gf.Name)
		case gf.Offset != cf.Offset || gf.Type.Size() != cf.Type.Size():
			t.Errorf("%s.%s: Go offset %d size %d, C offset %d size %d", name, gf.Name, gf.Offset, gf.Type.Size(), cf.Offset, cf.Type.Size())
		}
	}
}

// namedFields counts a cgo struct's fields without the padding cgo adds as
// blank fields.
func namedFields(t reflect.Type) int {
	n := 0
	for i := 0; i < t.NumField(); i++ {
		if t.Field(i).Name != "_" {
			n++
		}
	}
	return n
}

func TestOpaqueSizesAndIndexes(t *testing.T) {
	feats := vkheader.Structs["VkPhysicalDeviceFeatures"]
	if feats.Size() != sizeofPhysicalDeviceFeatures {
		t.Errorf("sizeof(VkPhysicalDeviceFeatures) = %d, mirror says %d", feats.Size(), sizeofPhysicalDeviceFeatures)
	}
	if p := vkheader.Structs["VkPhysicalDeviceProperties"]; p.Size() != sizeofPhysicalDeviceProperties {
		t.Errorf("sizeof(VkPhysicalDeviceProperties) = %d, mirror says %d", p.Size(), sizeofPhysicalDeviceProperties)
	}
	for field, index := range map[string]int{"shaderInt16": featShaderInt16, "shaderInt64": featShaderInt64} {
		f, _ := feats.FieldByName(field)
		if int(f.Offset)/4 != index {
			t.Errorf("VkPhysicalDeviceFeatures.%s is word %d, mirror index %d", field, f.Offset/4, index)
		}
	}
}

func TestStructureTypes(t *testing.T) {
	for name, got := range map[string]int64{
		"VK_STRUCTURE_TYPE_SUBMIT_INFO":                                                 stSubmitInfo,
		"VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO":                                stDescriptorSetAllocateInfo,
		"VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET":                                        stWriteDescriptorSet,
		"VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO":                                   stCommandBufferBeginInfo,
		"VK_STRUCTURE_TYPE_MEMORY_BARRIER":                                              stMemoryBarrier,
		"VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2":                                  stFeatures2,
		"VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2":                                stProperties2,
		"VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2":                         stMemoryProperties2,
		"VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES":                               stIDProperties,
		"VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES":                stFloat16Int8Features,
		"VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES":                      st16BitStorageFeatures,
		"VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES":                         stSubgroupProperties,
		"VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT":                       stDebugUtilsMessengerCreateInfo,
		"VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_SM_BUILTINS_PROPERTIES_NV":            stSMBuiltinsPropertiesNV,
		"VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES":                    stMaintenance3Properties,
		"VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_SUBGROUP_EXTENDED_TYPES_FEATURES":     stSubgroupExtendedTypesFeatures,
		"VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_8BIT_STORAGE_FEATURES":                       st8BitStorageFeatures,
		"VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_CORE_PROPERTIES_AMD":                  stShaderCorePropertiesAMD,
		"VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES":                           stDriverProperties,
		"VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES":            stSubgroupSizeControlProperties,
		"VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO":    stRequiredSubgroupSizeInfo,
		"VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES":              stSubgroupSizeControlFeatures,
		"VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT":                stMemoryBudgetProperties,
		"VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES":         stIntegerDotProductFeatures,
		"VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_PROPERTIES":       stIntegerDotProductProperties,
		"VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR": stPipelineExecutablePropertiesFeatures,
		"VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR":                                           stPipelineInfo,
		"VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_PROPERTIES_KHR":                          stPipelineExecutableProperties,
		"VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR":                                stPipelineExecutableInfo,
		"VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR":                           stPipelineExecutableStatistic,
		"VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES":                stVulkanMemoryModelFeatures,
		"VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR":             stCooperativeMatrixFeatures,
		"VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR":                           stCooperativeMatrixProperties,
		"VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_PROPERTIES_KHR":           stCooperativeMatrixDeviceProperties,
	} {
		want, ok := vkheader.StructureTypes[name]
		if !ok || want != got {
			t.Errorf("%s = %d, header says %d (present: %v)", name, got, want, ok)
		}
	}
}

// TestMirrorConstants checks the enum and flag values the mirrors use.
func TestMirrorConstants(t *testing.T) {
	for name, got := range map[string]int64{
		"VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR":       pipelineCreateCaptureStatistics,
		"VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR":  int64(StatBool32),
		"VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR":   int64(StatInt64),
		"VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR":  int64(StatUint64),
		"VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_FLOAT64_KHR": int64(StatFloat64),
		"VK_SHADER_STAGE_COMPUTE_BIT":                         shaderStageCompute,
	} {
		want, ok := vkheader.Constants[name]
		if !ok || want != got {
			t.Errorf("%s = %d, header says %d (present: %v)", name, got, want, ok)
		}
	}
	// The names CoopMatShape gives VkComponentTypeKHR and VkScopeKHR values.
	for name, want := range map[string]string{
		"VK_COMPONENT_TYPE_FLOAT16_KHR": "f16", "VK_COMPONENT_TYPE_FLOAT32_KHR": "f32", "VK_COMPONENT_TYPE_FLOAT64_KHR": "f64",
		"VK_COMPONENT_TYPE_SINT8_KHR": "s8", "VK_COMPONENT_TYPE_SINT16_KHR": "s16", "VK_COMPONENT_TYPE_SINT32_KHR": "s32",
		"VK_COMPONENT_TYPE_SINT64_KHR": "s64", "VK_COMPONENT_TYPE_UINT8_KHR": "u8", "VK_COMPONENT_TYPE_UINT16_KHR": "u16",
		"VK_COMPONENT_TYPE_UINT32_KHR": "u32", "VK_COMPONENT_TYPE_UINT64_KHR": "u64", "VK_COMPONENT_TYPE_BFLOAT16_KHR": "bf16",
		"VK_COMPONENT_TYPE_FLOAT8_E4M3_EXT": "e4m3", "VK_COMPONENT_TYPE_FLOAT8_E5M2_EXT": "e5m2",
	} {
		v, ok := vkheader.Constants[name]
		if got := componentName(uint32(v)); !ok || got != want {
			t.Errorf("%s (%d, present %v) is named %q, want %q", name, v, ok, got, want)
		}
	}
	for name, want := range map[string]string{
		"VK_SCOPE_DEVICE_KHR": "device", "VK_SCOPE_WORKGROUP_KHR": "workgroup", "VK_SCOPE_SUBGROUP_KHR": "subgroup",
		"VK_SCOPE_QUEUE_FAMILY_KHR": "queue-family",
	} {
		v, ok := vkheader.Constants[name]
		if got := scopeName(uint32(v)); !ok || got != want {
			t.Errorf("%s (%d, present %v) is named %q, want %q", name, v, ok, got, want)
		}
	}
	if len(componentTypes) != 14 || len(scopes) != 4 {
		t.Errorf("%d component types and %d scopes named; the test checks 14 and 4", len(componentTypes), len(scopes))
	}
}
