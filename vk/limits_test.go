package vk

import (
	"strings"
	"testing"
	"unsafe"

	vk "github.com/vulkan-go/vulkan"
)

func TestLimitProblem(t *testing.T) {
	good := fakeDevice(0, "discrete", vk.MakeVersion(1, 3, 0)).info
	for _, c := range []struct {
		name string
		edit func(*DeviceInfo)
		want string
	}{
		{"usable", func(*DeviceInfo) {}, ""},
		{"no shared memory", func(i *DeviceInfo) { i.SharedMemory = 0 }, "maxComputeSharedMemorySize 0"},
		{"no invocations", func(i *DeviceInfo) { i.MaxWorkgroupInvocations = 0 }, "maxComputeWorkGroupInvocations 0"},
		{"no workgroups in z", func(i *DeviceInfo) { i.MaxWorkgroupCount[2] = 0 }, "maxComputeWorkGroupCount 65535×65535×0"},
		{"no subgroup size", func(i *DeviceInfo) { i.SubgroupSize = 0 }, "subgroup size 0"},
		{"no minimum subgroup", func(i *DeviceInfo) { i.MinSubgroupSize = 0 }, "range 0..32"},
		{"inverted subgroup range", func(i *DeviceInfo) { i.MinSubgroupSize, i.MaxSubgroupSize = 64, 32 }, "range 64..32"},
	} {
		i := good
		c.edit(&i)
		if got := limitProblem(&i); (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%s: limitProblem = %q, want %q", c.name, got, c.want)
		}
	}
}

// TestChooseRefusesPartialDevices: a device with a zero limit, no compute
// queue or a missing entry point is refused with its reason, whether chosen
// automatically or by index.
func TestChooseRefusesPartialDevices(t *testing.T) {
	v13 := vk.MakeVersion(1, 3, 0)
	noShared := fakeDevice(0, "discrete", v13)
	noShared.info.SharedMemory = 0
	noQueue := fakeDevice(0, "discrete", v13)
	noQueue.info.Queue = -1
	lacking := fakeDevice(0, "discrete", v13)
	lacking.lacks = resolve(func(string) unsafe.Pointer { return nil }, []entry{{new(unsafe.Pointer), "vkGetPhysicalDeviceProperties2"}})
	for _, c := range []struct {
		dev  *physical
		want string
	}{
		{noShared, "device 0 (discrete-gpu) reports maxComputeSharedMemorySize 0"},
		{noQueue, "device 0 (discrete-gpu) has no compute queue"},
		{lacking, "device 0 (discrete-gpu) cannot be queried: the driver lacks the entry point vkGetPhysicalDeviceProperties2"},
	} {
		for _, o := range []Options{{Device: -1}, {Device: 0}} {
			if _, err := choose([]*physical{c.dev}, o); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("choose(%+v) = %v, want %q", o, err, c.want)
			}
		}
	}
}

func TestMemoryProblem(t *testing.T) {
	const local = uint32(vk.MemoryHeapDeviceLocalBit)
	good := physicalDeviceMemoryProperties{memoryTypeCount: 2, memoryHeapCount: 2}
	good.memoryHeaps[0] = memoryHeap{size: 8 << 30, flags: local}
	good.memoryHeaps[1] = memoryHeap{size: 16 << 30}
	good.memoryTypes[0] = memoryType{propertyFlags: memDeviceLocal, heapIndex: 0}
	good.memoryTypes[1] = memoryType{propertyFlags: memHostVisible | memHostCoherent, heapIndex: 1}
	for _, c := range []struct {
		name string
		edit func(*physicalDeviceMemoryProperties)
		want string
	}{
		{"usable", func(*physicalDeviceMemoryProperties) {}, ""},
		// What RADV's null devices report.
		{"no heaps", func(m *physicalDeviceMemoryProperties) { *m = physicalDeviceMemoryProperties{} }, "no memory heaps"},
		{"too many heaps", func(m *physicalDeviceMemoryProperties) { m.memoryHeapCount = 17 }, "17 memory heaps, more than Vulkan's 16"},
		{"no types", func(m *physicalDeviceMemoryProperties) { m.memoryTypeCount = 0 }, "no memory types"},
		{"too many types", func(m *physicalDeviceMemoryProperties) { m.memoryTypeCount = 33 }, "33 memory types, more than Vulkan's 32"},
		{"type in a missing heap", func(m *physicalDeviceMemoryProperties) { m.memoryTypes[1].heapIndex = 2 }, "memory type 1 in heap 2 of 2"},
		{"host memory only", func(m *physicalDeviceMemoryProperties) { m.memoryHeaps[0].flags = 0 }, "no device-local memory"},
		{"empty device-local heap", func(m *physicalDeviceMemoryProperties) { m.memoryHeaps[0].size = 0 }, "no device-local memory"},
	} {
		m := good
		c.edit(&m)
		if got := memoryProblem(&m); (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%s: memoryProblem = %q, want %q", c.name, got, c.want)
		}
	}
}

func TestRunProblem(t *testing.T) {
	good := DeviceInfo{MaxAllocation: 1 << 30, MaxStorageRange: 128 << 20}
	noAlloc, noRange := good, good
	noAlloc.MaxAllocation = 0
	noRange.MaxStorageRange = 0
	for _, c := range []struct {
		mem  string
		info DeviceInfo
		want string
	}{
		{"", good, ""},
		{"reports no memory heaps", good, "reports no memory heaps"},
		{"", noAlloc, "reports maxMemoryAllocationSize 0"},
		{"", noRange, "reports maxStorageBufferRange 0"},
	} {
		if got := runProblem(c.mem, &c.info); got != c.want {
			t.Errorf("runProblem(%q, %+v) = %q, want %q", c.mem, c.info, got, c.want)
		}
	}
}

// TestCannotRun: a device that cannot run work refuses buffers and
// sequences with a readable error, before any Vulkan call.
func TestCannotRun(t *testing.T) {
	d := &Device{info: DeviceInfo{Index: 0, Name: "Null hardware (RADV NAVI31)", CannotRun: "reports no memory heaps"},
		buffers: map[*Buffer]struct{}{}, sequences: map[*Sequence]struct{}{}}
	want := "device 0, Null hardware (RADV NAVI31), cannot run work: it reports no memory heaps"
	if _, err := d.NewBuffer(16, false); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("NewBuffer = %v, want %q", err, want)
	}
	if err := d.NewSequence().End(); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("NewSequence().End() = %v, want %q", err, want)
	}
	if d.ran.Load() {
		t.Error("a refused sequence marked the device as having run work")
	}
}

func TestResolve(t *testing.T) {
	var fn byte
	var a, b, c unsafe.Pointer
	have := map[string]bool{"vkA": true, "vkC": true}
	get := func(name string) unsafe.Pointer {
		if have[name] {
			return unsafe.Pointer(&fn)
		}
		return nil
	}
	if err := resolve(get, []entry{{&a, "vkA"}, {&c, "vkC"}}); err != nil || a == nil || c == nil {
		t.Fatalf("resolve of present entry points: %v (%v, %v)", err, a, c)
	}
	err := resolve(get, []entry{{&a, "vkA"}, {&b, "vkB"}, {&c, "vkC"}})
	if err == nil || err.Error() != "the driver lacks the entry point vkB" {
		t.Fatalf("resolve with vkB missing = %v", err)
	}
}

func TestPhysicalFunctions(t *testing.T) {
	var fn byte
	for _, c := range []struct {
		v11  bool
		need []string
	}{
		{true, []string{"vkGetPhysicalDeviceProperties2", "vkGetPhysicalDeviceFeatures2", "vkGetPhysicalDeviceMemoryProperties2"}},
		{false, []string{"vkGetPhysicalDeviceMemoryProperties"}},
	} {
		all := func(string) unsafe.Pointer { return unsafe.Pointer(&fn) }
		f, err := physicalFunctions(all, c.v11)
		if err != nil {
			t.Fatalf("v1.1 %v, all present: %v", c.v11, err)
		}
		if c.v11 && (f.properties2 == nil || f.features2 == nil || f.memory2 == nil) || !c.v11 && f.memory == nil {
			t.Errorf("v1.1 %v: unfilled %+v", c.v11, f)
		}
		for _, missing := range c.need {
			get := func(name string) unsafe.Pointer {
				if name == missing {
					return nil
				}
				return unsafe.Pointer(&fn)
			}
			if _, err := physicalFunctions(get, c.v11); err == nil || !strings.Contains(err.Error(), missing) {
				t.Errorf("v1.1 %v without %s: %v", c.v11, missing, err)
			}
		}
	}
}

// TestDeviceFunctionsMissing hides each entry point the recording path needs
// from a real device's table: Open must fail naming it, not leave a nil
// pointer for C to call. Hidden statistics queries only turn statistics off.
func TestDeviceFunctionsMissing(t *testing.T) {
	d := openTest(t)
	gdpa := proc(d.inst.id, "vkGetDeviceProcAddr")
	hide := func(names ...string) func(string) unsafe.Pointer {
		return func(name string) unsafe.Pointer {
			for _, n := range names {
				if n == name {
					return nil
				}
			}
			return d.deviceProc(gdpa, name)
		}
	}
	for _, name := range []string{"vkAllocateDescriptorSets", "vkCmdDispatch", "vkCmdPipelineBarrier", "vkQueueSubmit",
		"vkWaitForFences", "vkGetQueryPoolResults"} {
		fns, _, err := deviceFunctions(hide(name), false)
		if err == nil || fns != nil || !strings.Contains(err.Error(), name) {
			t.Errorf("without %s: table %v, error %v", name, fns, err)
		}
	}
	fns, stats, err := deviceFunctions(hide("vkGetPipelineExecutableStatisticsKHR"), true)
	if err != nil || stats || fns.getPipelineExecutableProperties != nil {
		t.Errorf("without the statistics query: statistics %v, error %v", stats, err)
	}
	freeFunctions(fns)
}
