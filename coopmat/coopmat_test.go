package coopmat

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vkinfer/vkinfer/attention"
	"github.com/vkinfer/vkinfer/internal/fixtures"
)

func frag(m, n, k int, a, c string) Fragment {
	return Fragment{M: m, N: n, K: k, A: a, B: a, C: c, Result: c, Scope: "subgroup"}
}

// rdna3 is an RDNA3 card under RADV with the shapes RADV offers there.
func rdna3() Device {
	return Device{VendorID: VendorAMD, Name: "AMD Radeon RX 7900 XTX (RADV NAVI31)", Driver: "radv",
		SubgroupSize: 64, MinSubgroupSize: 32, MaxSubgroupSize: 64, SizeControl: true, SharedMemory: 65536, MixedDot: true,
		Shapes: []Fragment{frag(16, 16, 16, "f16", "f16"), frag(16, 16, 16, "f16", "f32"), frag(16, 16, 16, "s8", "s32")}}
}

// nvidia is an NVIDIA card with several shapes (as the proprietary driver
// lists them on Ada: f16 16x8x16, 16x8x8, 16x16x16, s8 16x8x32, 16x16x32).
func nvidia() Device {
	return Device{VendorID: VendorNVIDIA, Name: "NVIDIA GeForce RTX 4070", Driver: "NVIDIA",
		SubgroupSize: 32, MinSubgroupSize: 32, MaxSubgroupSize: 32, SizeControl: true, SharedMemory: 49152, MixedDot: true,
		Shapes: []Fragment{frag(16, 8, 16, "f16", "f16"), frag(16, 8, 8, "f16", "f16"), frag(16, 16, 16, "f16", "f16"),
			frag(16, 8, 16, "f16", "f32"), frag(16, 8, 8, "f16", "f32"), frag(16, 16, 16, "f16", "f32"),
			frag(16, 8, 32, "s8", "s32"), frag(16, 16, 32, "s8", "s32")}}
}

func TestChoose(t *testing.T) {
	s16 := Shape{16, 16, 16}
	with := func(d Device, f func(*Device)) Device {
		d.Shapes = append([]Fragment(nil), d.Shapes...)
		f(&d)
		return d
	}
	for _, c := range []struct {
		name     string
		dev      Device
		f16, i8  Shape
		subgroup int
		reason   string // a part of the reason
	}{
		{"RDNA3 RADV", rdna3(), s16, s16, 64, "full subgroups of 64, its default size"},
		{"NVIDIA: 16x16x16 among several", nvidia(), s16, Shape{16, 16, 32}, 32, "full subgroups of 32"},
		{"NVIDIA without 16x16x16: the largest", with(nvidia(), func(d *Device) {
			d.Shapes = []Fragment{frag(16, 8, 8, "f16", "f32"), frag(16, 8, 16, "f16", "f32"), frag(8, 16, 16, "f16", "f32")}
		}), Shape{16, 8, 16}, Shape{}, 32, "16x8x16"},
		{"int8 follows the f16 shape", with(nvidia(), func(d *Device) {
			d.Shapes = append(d.Shapes, frag(16, 16, 16, "s8", "s32"))
		}), s16, s16, 32, "s8*s8+s32 16x16x16"},
		{"no extension", Device{VendorID: VendorNVIDIA, SubgroupSize: 32, SizeControl: true}, Shape{}, Shape{}, 0,
			"lacks VK_KHR_cooperative_matrix"},
		{"unusable, as the caller found", with(rdna3(), func(d *Device) {
			d.Shapes, d.Unusable = nil, "has VK_KHR_cooperative_matrix with its cooperativeMatrix feature off"
		}), Shape{}, Shape{}, 0, "cooperativeMatrix feature off"},
		// AMD's Windows driver offers the extension on an RX 5700 XT.
		{"RDNA1 under AMD's driver", with(rdna3(), func(d *Device) {
			d.Name, d.Driver, d.MixedDot, d.SharedMemory = "AMD Radeon RX 5700 XT", "AMD proprietary driver", false, 32768
		}), Shape{}, Shape{}, 0, "older than RDNA3"},
		{"Intel Xe-HPG (Arc A770)", Device{VendorID: VendorIntel, SubgroupSize: 32, MinSubgroupSize: 8, MaxSubgroupSize: 32,
			SizeControl: true, MixedDot: true, Shapes: []Fragment{frag(8, 8, 16, "f16", "f32")}}, Shape{}, Shape{}, 0, "older than Xe2"},
		{"Intel Xe2", Device{VendorID: VendorIntel, SubgroupSize: 32, MinSubgroupSize: 16, MaxSubgroupSize: 32,
			SizeControl: true, MixedDot: true, Shapes: []Fragment{frag(8, 16, 16, "f16", "f32")}}, Shape{8, 16, 16}, Shape{}, 32, "8x16x16"},
		{"no size control", with(rdna3(), func(d *Device) { d.SizeControl = false }), Shape{}, Shape{}, 0, "full subgroups"},
		{"default outside the range", with(nvidia(), func(d *Device) { d.MinSubgroupSize, d.MaxSubgroupSize = 8, 16 }),
			Shape{}, Shape{}, 0, "outside the sizes it can require (8..16)"},
		{"f16 accumulators only", with(rdna3(), func(d *Device) {
			d.Shapes = []Fragment{frag(16, 16, 16, "f16", "f16"), frag(16, 16, 16, "s8", "s32")}
		}), Shape{}, Shape{}, 0, "offers no f16*f16+f32->f32 subgroup shape (it has 16x16x16 f16*f16+f16->f16 (subgroup)"},
		{"workgroup scope does not count", with(nvidia(), func(d *Device) {
			d.Shapes = []Fragment{{M: 64, N: 64, K: 32, A: "f16", B: "f16", C: "f32", Result: "f32", Scope: "workgroup"}}
		}), Shape{}, Shape{}, 0, "offers no f16*f16+f32->f32 subgroup shape"},
		{"saturating int8 only", with(rdna3(), func(d *Device) {
			d.Shapes = []Fragment{frag(16, 16, 16, "f16", "f32"), {M: 16, N: 16, K: 16, A: "s8", B: "s8", C: "s32", Result: "s32",
				Saturating: true, Scope: "subgroup"}}
		}), s16, Shape{}, 64, "its default size"},
		{"sides not powers of two", with(nvidia(), func(d *Device) {
			d.Shapes = []Fragment{frag(12, 16, 16, "f16", "f32"), frag(16, 8, 8, "f16", "f32")}
		}), Shape{16, 8, 8}, Shape{}, 32, "16x8x8"},
		{"unsigned and mixed int8 do not count", with(rdna3(), func(d *Device) {
			d.Shapes = []Fragment{frag(16, 16, 16, "f16", "f32"), frag(16, 16, 16, "u8", "u32"),
				{M: 16, N: 16, K: 16, A: "u8", B: "s8", C: "s32", Result: "s32", Scope: "subgroup"}}
		}), s16, Shape{}, 64, ""},
	} {
		got := Choose(c.dev)
		if got.F16 != c.f16 || got.Int8 != c.i8 || got.Subgroup != c.subgroup || got.On() != !c.f16.IsZero() {
			t.Errorf("%s: %+v, want f16 %v int8 %v subgroup %d", c.name, got, c.f16, c.i8, c.subgroup)
		}
		if got.Reason == "" || strings.Contains(got.Reason, "\n") || !strings.Contains(got.Reason, c.reason) {
			t.Errorf("%s: reason %q, want one line containing %q", c.name, got.Reason, c.reason)
		}
	}
}

func TestChoiceString(t *testing.T) {
	if s := (Choice{}).String(); s != "off" {
		t.Errorf("zero choice: %q", s)
	}
	c := Choice{F16: Shape{16, 16, 16}, Int8: Shape{16, 16, 32}, Subgroup: 32}
	if s := c.String(); s != "16x16x16 f16, s8 16x16x32, subgroup 32" {
		t.Errorf("%q", s)
	}
	if s := (Shape{}).String(); s != "none" {
		t.Errorf("zero shape: %q", s)
	}
}

// recorded is what the policy must conclude from each recording in
// testdata: every file needs an entry, so a new recording fails the test
// until someone states what the policy should do with it.
var recorded = map[string]struct {
	f16, i8  Shape
	subgroup int
	reason   string // a part of the reason
	variant  Shape  // Int8Shape's: what the integer variant runs with
}{
	// RADV's null device for the RX 7900 XTX (Mesa 25.0.7): 16x16x16 only,
	// f16 with f16 or f32 accumulators, 8-bit in every signedness, with
	// and without saturation. Wave64, its default (rule 4). The integer
	// variant takes the 16x16x16 int8 shape (a Q6_K run per product).
	"navi31-radv-null.json": {Shape{16, 16, 16}, Shape{16, 16, 16}, 64, "full subgroups of 64, its default size", Shape{16, 16, 16}},
	// The H200 (driver 580.159.04): f16 fragments of 16x16x16, 16x8x16 and
	// 16x8x8 with f16 or f32 accumulators, 8-bit ones of 16x16x32 and
	// 16x8x32, bf16 16x16x16. Subgroups of 32, its only size. The integer
	// variant takes 16x16x32 (Q6_K's runs of 16 staged beside zeros).
	"nvidia-h200.json": {Shape{16, 16, 16}, Shape{16, 16, 32}, 32, "full subgroups of 32, its default size", Shape{16, 16, 32}},
}

func TestRecordings(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no recordings in testdata: %v", err)
	}
	seen := map[string]bool{}
	for _, f := range files {
		base := filepath.Base(f)
		seen[base] = true
		t.Run(strings.TrimSuffix(base, ".json"), func(t *testing.T) {
			want, ok := recorded[base]
			if !ok {
				t.Fatalf("no expectation for %s: add it to the table", base)
			}
			r, err := ReadRecording(f)
			if err != nil {
				t.Fatal(err)
			}
			if r.Command == "" || r.DriverInfo == "" || r.Device.Name == "" || len(r.Device.Shapes) == 0 {
				t.Errorf("incomplete recording: %+v", r)
			}
			got := Choose(r.Device)
			t.Logf("%s (%s): %s: %s", r.Device.Name, r.DriverInfo, got, got.Reason)
			if got.F16 != want.f16 || got.Int8 != want.i8 || got.Subgroup != want.subgroup || !strings.Contains(got.Reason, want.reason) {
				t.Errorf("Choose = %+v, want f16 %v int8 %v subgroup %d, reason with %q", got, want.f16, want.i8, want.subgroup, want.reason)
			}
			if v, why := Int8Shape(got); v != want.variant {
				t.Errorf("Int8Shape = %v (%s), want %v", v, why, want.variant)
			}
		})
	}
	for f := range recorded {
		if !seen[f] {
			t.Errorf("expectation for %s, but the file is gone", f)
		}
	}
}

// sharedDevice reads a property set of ../shared/testdata/devices as the
// policy sees it: the subgroup facts as the attention policy reads them,
// plus the cooperativeMatrix and integerDotProduct groups. Those records
// (vulkan.gpuinfo.org exports, vulkaninfo runs, llama.cpp log lines) list
// no shapes, so a device with the extension is marked unusable for that
// reason. has says whether it has VK_KHR_cooperative_matrix.
func sharedDevice(t *testing.T, path string) (d Device, has bool) {
	a, err := attention.LoadDevice(path)
	if err != nil {
		t.Fatal(err)
	}
	d = Device{VendorID: a.VendorID, DeviceID: a.DeviceID, Name: a.Name, Driver: a.Driver, SubgroupSize: a.SubgroupSize,
		MinSubgroupSize: a.MinSubgroupSize, MaxSubgroupSize: a.MaxSubgroupSize, SizeControl: a.SizeControl,
		SharedMemory: a.SharedMemory}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		CooperativeMatrix map[string]any `json:"cooperativeMatrix"`
		IntegerDotProduct map[string]any `json:"integerDotProduct"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	if v, ok := m.IntegerDotProduct["integerDotProduct4x8BitPackedMixedSignednessAccelerated"].(bool); ok {
		d.MixedDot = v
	}
	has, _ = m.CooperativeMatrix["VK_KHR_cooperative_matrix"].(bool)
	if has {
		d.Unusable = "has VK_KHR_cooperative_matrix, but the record lists no shapes"
	}
	return d, has
}

// TestSharedDevices runs the policy on every recorded device that says
// whether it has VK_KHR_cooperative_matrix (its cooperativeMatrix group):
// none may panic, none is on (the records hold no shapes), and the devices
// without the extension are off for that reason. Then, giving the devices
// that have it the shapes their drivers offer, the policy must turn RDNA3+
// and NVIDIA on and keep RDNA1/2 under AMD's own driver off.
func TestSharedDevices(t *testing.T) {
	dir := filepath.Dir(fixtures.Path(t, "devices", "README.md"))
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no device records in %s: %v", dir, err)
	}
	// With the shapes their drivers offer: what the policy must decide.
	withShapes := map[string]struct {
		on       bool
		subgroup int
	}{
		"amd-rx5700xt-amdwin.json":         {false, 0}, // RDNA1: emulated
		"amd-rx7800xt-amdwin.json":         {true, 64},
		"amd-rx7800xt-radv.json":           {true, 64},
		"amd-rx9070xt-amdwin.json":         {true, 64},
		"amd-rx9070xt-radv.json":           {true, 64},
		"cpu-llvmpipe-lavapipe.json":       {true, 8},  // Mesa 26's lavapipe emulates them on the CPU
		"intel-arc-a770-anv.json":          {false, 0}, // Xe-HPG: off until measured
		"intel-arc-a770-intelwin.json":     {false, 0},
		"nvidia-rtx2070-nvidia-linux.json": {true, 32},
		"nvidia-rtx4070-nvidia.json":       {true, 32},
	}
	groups := 0
	for _, f := range files {
		base := filepath.Base(f)
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(raw), `"cooperativeMatrix"`) {
			continue
		}
		groups++
		t.Run(strings.TrimSuffix(base, ".json"), func(t *testing.T) {
			d, has := sharedDevice(t, f)
			got := Choose(d)
			if got.On() {
				t.Errorf("on without shapes: %+v", got)
			}
			if !has && !strings.Contains(got.Reason, "lacks VK_KHR_cooperative_matrix") {
				t.Errorf("no extension, yet the reason is %q", got.Reason)
			}
			want, listed := withShapes[base]
			if has != listed {
				t.Fatalf("has the extension: %v; listed in withShapes: %v", has, listed)
			}
			if !has {
				return
			}
			d.Unusable = ""
			d.Shapes = []Fragment{frag(16, 16, 16, "f16", "f16"), frag(16, 16, 16, "f16", "f32"), frag(16, 16, 16, "s8", "s32")}
			got = Choose(d)
			t.Logf("with 16x16x16 shapes: %s: %s", got, got.Reason)
			if got.On() != want.on || got.Subgroup != want.subgroup {
				t.Errorf("with shapes: %+v, want on=%v subgroup %d", got, want.on, want.subgroup)
			}
		})
	}
	if groups < len(withShapes) {
		t.Errorf("only %d records with a cooperativeMatrix group", groups)
	}
}

// TestInt8Shape checks the integer variant's shape: the choice's 8-bit
// shape where its K is 16 or 32, else none, with the reason.
func TestInt8Shape(t *testing.T) {
	on := Choose(rdna3())
	for _, c := range []struct {
		name   string
		choice Choice
		want   Shape
		reason string
	}{
		{"RDNA3: 16x16x16", on, Shape{16, 16, 16}, "s8*s8+s32 16x16x16"},
		{"NVIDIA: 16x16x32", Choose(nvidia()), Shape{16, 16, 32}, "16x16x32"},
		{"off", Choice{Reason: "lacks VK_KHR_cooperative_matrix"}, Shape{}, "no usable cooperative matrices"},
		{"no 8-bit shape", Choice{F16: on.F16, Subgroup: 64}, Shape{}, "no s8*s8+s32"},
		{"K of 64", Choice{F16: on.F16, Int8: Shape{16, 16, 64}, Subgroup: 64}, Shape{}, "neither 16 nor 32"},
		{"K of 8", Choice{F16: on.F16, Int8: Shape{8, 8, 8}, Subgroup: 64}, Shape{}, "neither 16 nor 32"},
	} {
		got, why := Int8Shape(c.choice)
		if got != c.want || !strings.Contains(why, c.reason) {
			t.Errorf("%s: Int8Shape = %v (%s), want %v, reason with %q", c.name, got, why, c.want, c.reason)
		}
	}
}
