package engine

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vkinfer/vkinfer/coopmat"
	"github.com/vkinfer/vkinfer/internal/vktest"
	"github.com/vkinfer/vkinfer/vk"
	"github.com/vkinfer/vkinfer/vk/kernels"
)

// navi31Info is what RADV's navi31 null device reports (Mesa 25.0.7), cut
// to the fields the policy reads and two of its shapes.
func navi31Info() vk.DeviceInfo {
	return vk.DeviceInfo{Name: "Null hardware (RADV NAVI31)", Driver: "radv", VendorID: 0x1002, DeviceID: 0x744c,
		SubgroupSize: 64, MinSubgroupSize: 32, MaxSubgroupSize: 64, SizeControl: true, SharedMemory: 65536,
		DotAccelerated: true, DotMixedAccelerated: true, CoopMatrix: true,
		CoopMatShapes: []vk.CoopMatShape{
			{M: 16, N: 16, K: 16, A: "f16", B: "f16", C: "f32", Result: "f32", Scope: "subgroup"},
			{M: 16, N: 16, K: 16, A: "s8", B: "s8", C: "s32", Result: "s32", Scope: "subgroup"},
		}}
}

func TestCoopMatDevice(t *testing.T) {
	info := navi31Info()
	d := kernels.CoopDevice(info)
	if d.VendorID != 0x1002 || d.DeviceID != 0x744c || d.Name != info.Name || d.Driver != "radv" ||
		d.SubgroupSize != 64 || d.MinSubgroupSize != 32 || d.MaxSubgroupSize != 64 || !d.SizeControl ||
		d.SharedMemory != 65536 || !d.MixedDot || d.Unusable != "" || len(d.Shapes) != 2 {
		t.Fatalf("coopmatDevice = %+v", d)
	}
	want := coopmat.Fragment{M: 16, N: 16, K: 16, A: "s8", B: "s8", C: "s32", Result: "s32", Scope: "subgroup"}
	if d.Shapes[1] != want {
		t.Errorf("shape %+v, want %+v", d.Shapes[1], want)
	}
	// A device whose extension Open left alone passes on why, and no shapes.
	info.CoopMatrix, info.CoopMatrixOff = false, "runs under a validation layer (1.3.239) that predates VK_KHR_cooperative_matrix"
	if d := kernels.CoopDevice(info); len(d.Shapes) != 0 || d.Unusable != info.CoopMatrixOff {
		t.Errorf("withheld: %d shapes, unusable %q", len(d.Shapes), d.Unusable)
	}
}

func TestCoopMatFor(t *testing.T) {
	on, off := true, false
	navi31 := navi31Info()
	lvp := vk.DeviceInfo{Name: "llvmpipe (LLVM 15.0.6, 256 bits)", Driver: "llvmpipe", VendorID: 0x10005,
		SubgroupSize: 8, MinSubgroupSize: 8, MaxSubgroupSize: 8, SizeControl: true}
	for _, c := range []struct {
		name string
		info vk.DeviceInfo
		want *bool
		on   bool
		err  string
	}{
		{"navi31 auto", navi31, nil, true, ""},
		{"navi31 on", navi31, &on, true, ""},
		{"navi31 off", navi31, &off, false, ""},
		{"lavapipe auto", lvp, nil, false, ""},
		{"lavapipe off", lvp, &off, false, ""},
		{"lavapipe on", lvp, &on, false,
			"vulkan: cooperative matrices asked for, but llvmpipe (LLVM 15.0.6, 256 bits) lacks VK_KHR_cooperative_matrix"},
	} {
		got, err := coopMatFor(c.info, c.want)
		switch {
		case c.err != "":
			if err == nil || !strings.HasPrefix(err.Error(), c.err) {
				t.Errorf("%s: err %v, want %q", c.name, err, c.err)
			}
		case err != nil:
			t.Errorf("%s: %v", c.name, err)
		case got.On() != c.on || got.Reason == "":
			t.Errorf("%s: %+v, want on=%v with a reason", c.name, got, c.on)
		case !got.On() && (got.F16 != coopmat.Shape{} || got.Int8 != coopmat.Shape{} || got.Subgroup != 0):
			t.Errorf("%s: off but %+v", c.name, got)
		case got.On() && (got.F16 != coopmat.Shape{M: 16, N: 16, K: 16} || got.Subgroup != 64):
			t.Errorf("%s: %+v, want 16x16x16 on subgroups of 64", c.name, got)
		}
	}
}

// TestCoopInt8For: the integer variant needs cooperative matrices on, an
// 8-bit shape it takes (coopmat.Int8Shape) and shaderInt8.
func TestCoopInt8For(t *testing.T) {
	navi31 := navi31Info()
	navi31.Int8 = true
	on, _ := coopMatFor(navi31, nil)
	noInt8 := navi31
	noInt8.Int8 = false
	k64 := on
	k64.Int8 = coopmat.Shape{M: 16, N: 16, K: 64}
	for _, c := range []struct {
		name   string
		info   vk.DeviceInfo
		choice coopmat.Choice
		err    string
	}{
		{"navi31", navi31, on, ""},
		{"off", navi31, coopmat.Choice{Reason: "was asked not to use them"}, "cooperative matrices are off: Null hardware (RADV NAVI31) was asked not to use them"},
		{"no 8-bit shape", navi31, coopmat.Choice{F16: on.F16, Subgroup: 64}, "but Null hardware (RADV NAVI31) offers no s8*s8+s32->s32 subgroup shape"},
		{"K of 64", navi31, k64, "whose K is neither 16 nor 32"},
		{"no shaderInt8", noInt8, on, "lacks shaderInt8"},
	} {
		err := coopInt8For(c.info, c.choice)
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: err %v, want one with %q", c.name, err, c.err)
		}
	}
}

// TestNewCoopMat: on the test device (lavapipe in CI, which has no
// cooperative matrices before Mesa 26, and whose validated Open would leave
// them alone under a layer older than the extension) --coopmat on fails
// naming the device and why, and auto agrees with the policy.
func TestNewCoopMat(t *testing.T) {
	dev := vktest.Open(t)
	policy := CoopMatChoice(dev.Info())
	e, err := New(dev, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := e.CoopMat(); got.On() != policy.On() || got.F16 != policy.F16 || got.Subgroup != policy.Subgroup {
		t.Errorf("auto: %+v, policy %+v", got, policy)
	}
	t.Logf("%s: %s (%s)", dev.Info().Name, e.CoopMat(), e.CoopMat().Reason)
	e.Close()
	if policy.On() {
		t.Logf("nothing to check: %s runs cooperative matrices; the rest checks a device without", dev.Info().Name)
		return
	}
	on := true
	_, err = New(dev, Options{CoopMat: &on})
	if err == nil || !strings.HasPrefix(err.Error(), "vulkan: cooperative matrices asked for, but "+dev.Info().Name+" ") {
		t.Fatalf("--coopmat on without them: %v", err)
	}
	_, err = New(dev, Options{CoopInt8: true})
	if err == nil || !strings.HasPrefix(err.Error(), "vulkan: integer cooperative-matrix products asked for, but cooperative matrices are off: "+dev.Info().Name+" ") {
		t.Fatalf("--coopmat int8 without them: %v", err)
	}
}

// record names the file TestRecordCoopMatDevice writes (coopmat/testdata
// README has the command); recordDevice picks the device (-1: the one Open
// chooses, a GPU before a CPU driver).
var (
	record       = flag.String("record", "", "TestRecordCoopMatDevice: write the device's cooperative-matrix properties to this JSON file")
	recordDevice = flag.Int("record-device", -1, "TestRecordCoopMatDevice: the device index (-1: Open's choice)")
)

// TestRecordCoopMatDevice records the properties the cooperative-matrix
// policy reads from a real driver into a fixture for the coopmat package's
// tests, when -record names the file. It opens the device without
// validation: an older validation layer would hide the extension.
func TestRecordCoopMatDevice(t *testing.T) {
	if *record == "" {
		return // a recording tool, run by hand with -record=FILE; not a skip, which CI fails on
	}
	dev, err := vk.Open(vk.Options{Device: *recordDevice, AllowCPU: true})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	info := dev.Info()
	cmd := "go test ./vk/engine -run '^TestRecordCoopMatDevice$' -count=1 -record=" + filepath.Base(*record)
	if *recordDevice >= 0 {
		cmd += " -record-device=" + flag.Lookup("record-device").Value.String()
	}
	for _, v := range []string{"VK_DRIVER_FILES", "RADV_FORCE_FAMILY"} {
		if val := os.Getenv(v); val != "" {
			cmd = v + "=" + val + " " + cmd
		}
	}
	r := coopmat.Recording{Command: cmd, DriverInfo: info.DriverInfo, APIVersion: info.APIVersion,
		Date: time.Now().UTC().Format("2006-01-02"), Device: kernels.CoopDevice(info)}
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(*record, append(js, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s (%s): %d shapes, choice %s: %s", info.Name, info.DriverInfo, len(r.Device.Shapes),
		coopmat.Choose(r.Device), coopmat.Choose(r.Device).Reason)
}
