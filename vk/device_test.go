package vk

import (
	"strings"
	"testing"
	"unsafe"

	vk "github.com/vulkan-go/vulkan"
)

func TestDevicesLavapipe(t *testing.T) {
	devs, err := Devices()
	needVulkan(t, err)
	if len(devs) == 0 {
		t.Fatal("Devices: none")
	}
	for i, d := range devs {
		t.Logf("\n%s", d.Report())
		if d.Index != i || d.Name == "" || d.APIVersion == "" || len(d.Heaps) == 0 || d.MaxAllocation == 0 {
			t.Errorf("device %d: incomplete info %+v", i, d)
		}
		if d.MaxAllocation > d.Heaps[0].Size && d.Heaps[0].DeviceLocal && len(d.Heaps) == 1 {
			t.Errorf("device %d: MaxAllocation %d exceeds the only heap %d", i, d.MaxAllocation, d.Heaps[0].Size)
		}
		if d.MinSubgroupSize > d.SubgroupSize || d.SubgroupSize > d.MaxSubgroupSize {
			t.Errorf("device %d: subgroup %d outside [%d, %d]", i, d.SubgroupSize, d.MinSubgroupSize, d.MaxSubgroupSize)
		}
	}
	var lvp *DeviceInfo
	for i := range devs {
		if devs[i].Driver == "llvmpipe" {
			lvp = &devs[i]
		}
	}
	if lvp == nil {
		// A machine without lavapipe (a GPU's driver alone): the checks
		// above are all there is (CI fails on a skipped test).
		t.Log("no lavapipe device; the rest checks its known properties")
		return
	}
	// Mesa 22.3 lavapipe, as vulkaninfo reports it.
	if lvp.Type != "cpu" || !strings.HasPrefix(lvp.Name, "llvmpipe") || !strings.HasPrefix(lvp.DriverInfo, "Mesa") {
		t.Errorf("lavapipe identity: type %q name %q driver info %q", lvp.Type, lvp.Name, lvp.DriverInfo)
	}
	if lvp.SubgroupSize != 8 || lvp.MinSubgroupSize != 8 || lvp.MaxSubgroupSize != 8 || !lvp.SizeControl {
		t.Errorf("lavapipe subgroups: %d [%d, %d] size control %v", lvp.SubgroupSize, lvp.MinSubgroupSize, lvp.MaxSubgroupSize, lvp.SizeControl)
	}
	if lvp.SharedMemory != 32<<10 || lvp.MaxWorkgroupInvocations != 1024 {
		t.Errorf("lavapipe limits: shared %d, invocations %d", lvp.SharedMemory, lvp.MaxWorkgroupInvocations)
	}
	if lvp.MaxStorageRange != 128<<20 || lvp.MaxAllocation == 0 || lvp.MaxAllocation > lvp.Heaps[0].Size {
		t.Errorf("lavapipe sizes: storage range %d, max allocation %d, heap %d", lvp.MaxStorageRange, lvp.MaxAllocation, lvp.Heaps[0].Size)
	}
	if !lvp.FP16 || !lvp.Int8 || !lvp.Storage16 || !lvp.Storage8 || !lvp.IntegerDot || lvp.CoopMatrix {
		t.Errorf("lavapipe features: %+v", lvp)
	}
	if !lvp.TimestampValid || lvp.TimestampPeriod != 1 || lvp.ComputeUnits != 0 {
		t.Errorf("lavapipe timestamps %v period %v, compute units %d", lvp.TimestampValid, lvp.TimestampPeriod, lvp.ComputeUnits)
	}
	if lvp.UUID == [16]byte{} {
		t.Error("lavapipe UUID is zero")
	}
	r := lvp.Report()
	for _, want := range []string{lvp.Name, "cpu", "subgroup", "8 (range 8..8)", "32.0 KiB", "128.0 MiB", "timestamps"} {
		if !strings.Contains(r, want) {
			t.Errorf("Report lacks %q:\n%s", want, r)
		}
	}
}

func TestOpenInfoMatchesDevices(t *testing.T) {
	d := openTest(t)
	devs, err := Devices()
	must(t, err)
	info := d.Info()
	if info.Index >= len(devs) || devs[info.Index].Name != info.Name || devs[info.Index].UUID != info.UUID {
		t.Fatalf("Open chose %+v, which Devices does not list at index %d", info, info.Index)
	}
	info.Heaps[0].Size = 1 // Info must hand out a copy
	if d.Info().Heaps[0].Size == 1 {
		t.Error("Info shares its Heaps slice with the device")
	}
}

func TestOpenBadIndex(t *testing.T) {
	_, err := Devices()
	needVulkan(t, err)
	_, err = Open(Options{Device: 99})
	if err == nil || !strings.Contains(err.Error(), "device 99 does not exist") {
		t.Fatalf("Open(Device: 99) = %v, want a 'does not exist' error", err)
	}
}

// provoke makes an invalid call through the binding on d: a buffer of
// size 0 violates VUID-VkBufferCreateInfo-size-00912.
func provoke(d *Device) {
	var buf vk.Buffer
	ci := &vk.BufferCreateInfo{SType: vk.StructureTypeBufferCreateInfo, Size: 0, Usage: vk.BufferUsageFlags(bufferUsage)}
	if vk.CreateBuffer(d.h, ci, nil, &buf) == vk.Success && unsafe.Pointer(buf) != nil {
		vk.DestroyBuffer(d.h, buf, nil)
	}
}

const provoked = "VUID-VkBufferCreateInfo-size-00912"

// TestValidationIsRecorded proves the messenger works: an invalid call
// through the binding must produce a message.
func TestValidationIsRecorded(t *testing.T) {
	d, err := Open(Options{Device: -1, AllowCPU: true, Validation: true})
	needVulkan(t, err)
	provoke(d)
	d.Close()
	msgs := d.Messages()
	if len(msgs) == 0 || !strings.Contains(strings.Join(msgs, "\n"), provoked) {
		t.Fatalf("messages = %q, want the size-00912 error", msgs)
	}
}

// TestMessagesPerDevice checks that devices opened one after another on the
// process's validation instance keep their messages apart: the next device
// starts with none of the last one's, and a closed device's list does not
// grow with the next one's.
func TestMessagesPerDevice(t *testing.T) {
	o := Options{Device: -1, AllowCPU: true, Validation: true}
	d, err := Open(o)
	needVulkan(t, err)
	provoke(d)
	d.Close()
	first := d.Messages()
	if !strings.Contains(strings.Join(first, "\n"), provoked) {
		t.Fatalf("first device: messages = %q, want the size-00912 error", first)
	}
	e, err := Open(o)
	must(t, err)
	defer e.Close()
	if msgs := e.Messages(); len(msgs) != 0 {
		t.Errorf("a fresh device reports %d messages: %q", len(msgs), msgs)
	}
	provoke(e)
	if msgs := e.Messages(); !strings.Contains(strings.Join(msgs, "\n"), provoked) {
		t.Errorf("second device: messages = %q, want the size-00912 error", msgs)
	}
	if again := d.Messages(); len(again) != len(first) {
		t.Errorf("the closed device's messages grew from %d to %d with the next device's", len(first), len(again))
	}
}

// TestInstanceOutlivesDevices opens and closes more devices than NVIDIA's
// driver lets a process create instances (30; docs/VULKAN.md): they must
// all come from the one instance the first created.
func TestInstanceOutlivesDevices(t *testing.T) {
	var first *instance
	for i := range 40 {
		d, err := Open(Options{Device: -1, AllowCPU: true})
		needVulkan(t, err)
		switch {
		case first == nil:
			first = d.inst
		case d.inst != first:
			t.Fatalf("device %d was opened on a new instance", i)
		}
		d.Close()
	}
	if _, err := Devices(); err != nil {
		t.Fatal(err)
	}
	if in, err := sharedInstance(false, false); err != nil || in != first {
		t.Errorf("Devices and the next device: instance %p (%v), want the devices' %p", in, err, first)
	}
}

// fakeDevice is a device with usable limits and a compute queue (family 0).
func fakeDevice(index int, typ string, api uint32) *physical {
	return &physical{info: DeviceInfo{Index: index, Name: typ + "-gpu", Type: typ, SharedMemory: 32 << 10, MaxWorkgroupInvocations: 1024,
		MaxWorkgroupCount: [3]uint32{65535, 65535, 65535}, SubgroupSize: 32, MinSubgroupSize: 32, MaxSubgroupSize: 32}, api: api}
}

func TestChoose(t *testing.T) {
	v13, v11 := vk.MakeVersion(1, 3, 0), vk.MakeVersion(1, 1, 0)
	cpu, integ, disc, old := fakeDevice(0, "cpu", v13), fakeDevice(1, "integrated", v13), fakeDevice(2, "discrete", v13), fakeDevice(3, "discrete", v11)
	for _, c := range []struct {
		name string
		devs []*physical
		o    Options
		want *physical
		err  string
	}{
		{"discrete first", []*physical{cpu, integ, disc}, Options{Device: -1}, disc, ""},
		{"integrated over cpu", []*physical{cpu, integ}, Options{Device: -1, AllowCPU: true}, integ, ""},
		{"cpu alone", []*physical{cpu}, Options{Device: -1}, cpu, ""},
		{"old gpu skipped", []*physical{old, integ}, Options{Device: -1}, integ, ""},
		{"cpu only with allow", []*physical{old, cpu}, Options{Device: -1, AllowCPU: true}, cpu, ""},
		{"cpu refused beside a gpu", []*physical{old, cpu}, Options{Device: -1}, nil, "pass AllowCPU"},
		{"explicit index", []*physical{cpu, disc}, Options{Device: 0}, cpu, ""},
		{"explicit old", []*physical{old}, Options{Device: 0}, nil, "needs 1.2"},
		{"out of range", []*physical{cpu}, Options{Device: 3}, nil, "does not exist"},
		{"none", nil, Options{Device: -1}, nil, "no Vulkan device"},
	} {
		got, err := choose(c.devs, c.o)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: err = %v, want %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%s: got %v, %v; want %s", c.name, got, err, c.want.info.Name)
		}
	}
}

func TestMissingLoader(t *testing.T) {
	_, err := openLoader("libvkinfer-no-such-loader.so.1")
	if err == nil || !strings.Contains(err.Error(), "vulkan: cannot load libvkinfer-no-such-loader.so.1") ||
		!strings.Contains(err.Error(), "install the Vulkan loader") {
		t.Fatalf("openLoader of a missing library = %v", err)
	}
}

func TestMissingValidationLayer(t *testing.T) {
	_, err := Devices()
	needVulkan(t, err)
	// The loader looks for explicit layers only in VK_LAYER_PATH when set.
	t.Setenv("VK_LAYER_PATH", t.TempDir())
	// newInstance, not Open: Open reuses the process's validation instance
	// if an earlier test made one.
	in, err := newInstance(true, false)
	if err == nil {
		in.destroy()
	}
	if err == nil || !strings.Contains(err.Error(), "VK_LAYER_KHRONOS_validation is not installed") {
		t.Fatalf("a validation instance with no layers on the path = %v", err)
	}
}
