package vk

import (
	"fmt"

	vk "github.com/vulkan-go/vulkan"
)

// What a device must report before vkinfer uses it. A driver that reports
// zero where a real device cannot (a partial driver, a null device, a
// layer that filters badly) gets a readable refusal here instead of a
// division by zero or an out-of-range index further down.

// unusable says why Open cannot run on p, "" when it can.
func unusable(p *physical) string {
	switch {
	case p.api < minVersion:
		return fmt.Sprintf("supports Vulkan %s; vkinfer needs 1.2", versionString(p.api))
	case p.lacks != nil:
		return "cannot be queried: " + p.lacks.Error()
	case p.info.Queue < 0:
		return "has no compute queue"
	}
	return limitProblem(&p.info)
}

// limitProblem names the first compute limit the device reports as zero
// ("" when none is): the kernels size every workgroup and dispatch from
// these, and the attention policy divides by the subgroup sizes.
func limitProblem(i *DeviceInfo) string {
	c := i.MaxWorkgroupCount
	switch {
	case i.SharedMemory == 0:
		return "reports maxComputeSharedMemorySize 0"
	case i.MaxWorkgroupInvocations == 0:
		return "reports maxComputeWorkGroupInvocations 0"
	case c[0] == 0 || c[1] == 0 || c[2] == 0:
		return fmt.Sprintf("reports maxComputeWorkGroupCount %d×%d×%d", c[0], c[1], c[2])
	case i.SubgroupSize == 0 || i.MinSubgroupSize == 0 || i.MinSubgroupSize > i.MaxSubgroupSize:
		return fmt.Sprintf("reports subgroup size %d (range %d..%d)", i.SubgroupSize, i.MinSubgroupSize, i.MaxSubgroupSize)
	}
	return ""
}

// memoryProblem says what makes the memory properties unusable, "" when
// nothing does: no heaps or types, counts beyond Vulkan's arrays (which
// would index past them), a type naming a heap that does not exist, or no
// device-local heap with any memory in it.
func memoryProblem(m *physicalDeviceMemoryProperties) string {
	switch {
	case m.memoryHeapCount == 0:
		return "reports no memory heaps"
	case m.memoryHeapCount > uint32(len(m.memoryHeaps)):
		return fmt.Sprintf("reports %d memory heaps, more than Vulkan's %d", m.memoryHeapCount, len(m.memoryHeaps))
	case m.memoryTypeCount == 0:
		return "reports no memory types"
	case m.memoryTypeCount > uint32(len(m.memoryTypes)):
		return fmt.Sprintf("reports %d memory types, more than Vulkan's %d", m.memoryTypeCount, len(m.memoryTypes))
	}
	for i, t := range m.memoryTypes[:m.memoryTypeCount] {
		if t.heapIndex >= m.memoryHeapCount {
			return fmt.Sprintf("reports memory type %d in heap %d of %d", i, t.heapIndex, m.memoryHeapCount)
		}
	}
	for _, h := range m.memoryHeaps[:m.memoryHeapCount] {
		if h.flags&uint32(vk.MemoryHeapDeviceLocalBit) != 0 && h.size > 0 {
			return ""
		}
	}
	return "reports no device-local memory"
}

// runProblem says why a device cannot run work (DeviceInfo.CannotRun): the
// memory problem queryMemory found, else an allocation or storage-binding
// limit of zero, either of which refuses every buffer.
func runProblem(memProblem string, i *DeviceInfo) string {
	switch {
	case memProblem != "":
		return memProblem
	case i.MaxAllocation == 0:
		return "reports maxMemoryAllocationSize 0"
	case i.MaxStorageRange == 0:
		return "reports maxStorageBufferRange 0"
	}
	return ""
}

// CanRun fails, naming the device and the reason, when it cannot run work
// (DeviceInfo.CannotRun). Such a device refuses buffers and sequences, but
// compiles pipelines.
func (d *Device) CanRun() error {
	if d.info.CannotRun == "" {
		return nil
	}
	return fmt.Errorf("vulkan: device %d, %s, cannot run work: it %s (a driver's null device, such as RADV's for RADV_FORCE_FAMILY, compiles pipelines but executes nothing)",
		d.info.Index, d.info.Name, d.info.CannotRun)
}
