package attention

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/vkinfer/vkinfer/internal/fixtures"
)

// waveCase is what the policy must conclude from one recorded device. sg32 and
// sg64 are the hardware subgroup an explicit --wave 32 / --wave 64 runs on
// (0: the request must fail), req32/req64 whether the pipeline pins it.
type waveCase struct {
	vendor       uint32
	wave         int
	native       bool
	sg32, sg64   int
	req32, req64 bool
}

// Every file in testdata/devices must be listed here: a new record fails the
// test until someone states what the policy should do with it.
var recorded = map[string]waveCase{
	// RDNA1-4 under RADV and AMD's Windows driver: default subgroupSize 64,
	// range 32..64, compute stage pinnable → wave32 pinned.
	"amd-rx5700xt-radv.json":   {VendorAMD, 32, true, 32, 64, true, true},
	"amd-rx5700xt-amdwin.json": {VendorAMD, 32, true, 32, 64, true, true},
	"amd-rx6600-radv.json":     {VendorAMD, 32, true, 32, 64, true, true},
	"amd-rx6800xt-amdwin.json": {VendorAMD, 32, true, 32, 64, true, true},
	"amd-rx7800xt-radv.json":   {VendorAMD, 32, true, 32, 64, true, true},
	"amd-rx7800xt-amdwin.json": {VendorAMD, 32, true, 32, 64, true, true},
	"amd-rx9070xt-radv.json":   {VendorAMD, 32, true, 32, 64, true, true},
	"amd-rx9070xt-amdwin.json": {VendorAMD, 32, true, 32, 64, true, true},
	// RDNA2 whose PAL driver lists no stage for a required size (and the
	// record has no vendorID): wave32 cannot be pinned, 32 does not divide
	// the default 64 → wave64, and --wave 32 is an error.
	"amd-rx6500xt-amdpal-edgecase.json": {0, 64, true, 0, 64, false, false},
	// RDNA3 / RDNA3.5 records that only hold llama.cpp's device line: the
	// default 64 without min/max. The policy cannot see wave32 there (the real
	// devices report 32..64 like the 7800 XT and get 32); it must not guess.
	"amd-rx7900xtx-radv.json":     {VendorAMD, 64, true, 0, 64, false, false},
	"amd-radeon8060s-radv.json":   {VendorAMD, 64, true, 0, 64, false, false},
	"amd-radeon8060s-amdvlk.json": {VendorAMD, 64, true, 0, 64, false, false},
	// Identity only, no subgroup data: nothing can run.
	"amd-780m-radv.json": {VendorAMD, 64, false, 0, 0, false, false},
	// GCN: 64..64 → wave64; --wave 32 is an error. RADV on Polaris lists no
	// stage, so 64 runs as the default rather than pinned.
	"amd-rx580-radv.json":   {VendorAMD, 64, true, 0, 64, false, false},
	"amd-rx580-amdwin.json": {VendorAMD, 64, true, 0, 64, false, true},
	// Vega 20: range 64..64 only (default deduced), no vendorID, no stage list.
	"amd-radeonprovii-radv.json": {0, 64, true, 0, 64, false, false},
	// NVIDIA: 32 native; wave64 spans two warps.
	"nvidia-rtx4070-nvidia.json":       {VendorNVIDIA, 32, true, 32, 32, true, true},
	"nvidia-rtx2070-nvidia-linux.json": {VendorNVIDIA, 32, true, 32, 32, true, true},
	// The maintainers' H200 record has no requiredSubgroupSizeStages, so
	// nothing is pinned; 32 is the default anyway.
	"nvidia-h200-proprietary.json": {VendorNVIDIA, 32, true, 32, 32, false, false},
	// Intel 8..32: 32 pinned (its default and maximum); wave64 = 2 × 32.
	"intel-arc-a770-anv.json":      {VendorIntel, 32, true, 32, 32, true, true},
	"intel-arc-a770-intelwin.json": {VendorIntel, 32, true, 32, 32, true, true},
	"intel-irisxe-tgl-anv.json":    {VendorIntel, 32, true, 32, 32, true, true},
	// lavapipe 8..8: wave32 emulated over 4 subgroups of 8 (pinned where the
	// record lists the compute stage).
	"cpu-llvmpipe-lavapipe.json": {VendorMesa, 32, false, 8, 8, true, true},
	"lavapipe-mesa22.json":       {VendorMesa, 32, false, 8, 8, false, false},
}

func TestWaveRecordedDevices(t *testing.T) {
	dir := filepath.Dir(fixtures.Path(t, "devices", "README.md"))
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no device records in %s: %v", dir, err)
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
			dev, err := LoadDevice(f)
			if err != nil {
				t.Fatal(err)
			}
			if dev.VendorID != want.vendor {
				t.Errorf("vendor %#x, want %#x", dev.VendorID, want.vendor)
			}
			w, native := Wave(dev)
			if w != want.wave || native != want.native {
				t.Errorf("Wave = %d native=%v, want %d native=%v", w, native, want.wave, want.native)
			}
			checkChoice(t, dev, 32, want.sg32, want.req32)
			checkChoice(t, dev, 64, want.sg64, want.req64)
			// auto resolves to Wave's answer.
			if want.native || want.sg32 != 0 {
				c, err := ChooseWave(dev, 0)
				if err != nil || c.W != want.wave || c.Native() != want.native {
					t.Errorf("ChooseWave(auto) = %v, %v; want wave %d native=%v", c, err, want.wave, want.native)
				}
			}
		})
	}
	for f := range recorded {
		if !seen[f] {
			t.Errorf("expectation for %s, but the file is gone", f)
		}
	}
}

func checkChoice(t *testing.T, dev Device, w, sg int, req bool) {
	t.Helper()
	c, err := ChooseWave(dev, w)
	if sg == 0 {
		if err == nil {
			t.Errorf("--wave %d: got %v, want an error", w, c)
		} else if !strings.Contains(err.Error(), "supports:") {
			t.Errorf("--wave %d: error does not list what the device supports: %v", w, err)
		}
		return
	}
	if err != nil {
		t.Errorf("--wave %d: %v", w, err)
		return
	}
	if c.W != w || c.Subgroup != sg || c.Require != req {
		t.Errorf("--wave %d = %+v, want subgroup %d require=%v", w, c, sg, req)
	}
}

// RDNA reports the same default subgroup size (64) as GCN, and names change
// between driver versions: only minSubgroupSize may decide.
func TestWaveNotFooledByDefaultOrName(t *testing.T) {
	rdna, err := LoadDevice(fixtures.Path(t, "devices", "amd-rx7800xt-radv.json"))
	if err != nil {
		t.Fatal(err)
	}
	if rdna.SubgroupSize != 64 {
		t.Fatalf("fixture changed: RDNA default subgroupSize %d, the point of this test is 64", rdna.SubgroupSize)
	}
	anon := rdna
	anon.Name, anon.Driver, anon.DeviceID = "AMD Unknown (RADV GFX1103_R1)", "", 0
	gcn := rdna
	gcn.MinSubgroupSize = 64
	renamed := gcn
	renamed.Name = "AMD Radeon RX 7800 XT (RADV NAVI32)" // an RDNA name on GCN properties
	for _, c := range []struct {
		name string
		dev  Device
		want int
	}{{"rdna", rdna, 32}, {"rdna unnamed", anon, 32}, {"gcn", gcn, 64}, {"gcn with an rdna name", renamed, 64}} {
		if w, native := Wave(c.dev); w != c.want || !native {
			t.Errorf("%s: Wave = %d native=%v, want %d native", c.name, w, native, c.want)
		}
	}
	// Without the compute stage in requiredSubgroupSizeStages, 32 cannot be
	// pinned: fall back to the default, and say so when 32 is forced.
	noStage := rdna
	noStage.SizeControl = false
	if w, _ := Wave(noStage); w != 64 {
		t.Errorf("RDNA without size control: Wave = %d, want 64", w)
	}
	if _, err := ChooseWave(noStage, 32); err == nil {
		t.Error("RDNA without size control: --wave 32 succeeded")
	}
}

func TestWaveLimits(t *testing.T) {
	dev := Device{VendorID: VendorMesa, SubgroupSize: 8, MinSubgroupSize: 8, MaxSubgroupSize: 8,
		SizeControl: true, MaxWorkgroupInvocations: 32}
	if _, err := ChooseWave(dev, 64); err == nil || !strings.Contains(err.Error(), "wave32 (emulated") {
		t.Errorf("wave 64 over a 32-invocation limit: %v, want an error listing wave32", err)
	}
	if _, err := ChooseWave(dev, 16); err == nil {
		t.Error("wave 16 accepted")
	}
	for in, want := range map[string]int{"auto": 0, "": 0, "32": 32, " 64": 64} {
		if got, err := ParseWave(in); err != nil || got != want {
			t.Errorf("ParseWave(%q) = %d, %v", in, got, err)
		}
	}
	if _, err := ParseWave("48"); err == nil {
		t.Error("ParseWave(48) accepted")
	}
}

// matVecRecorded is the subgroup size the matrix-vector products require
// on each recorded device (0: the driver's choice) for --wave auto, 32
// and 64. Every file of testdata/devices must be listed.
var matVecRecorded = map[string][3]int{
	// RDNA1-4 with a pinnable compute stage: the policy's 64, and either
	// size on request.
	"amd-rx5700xt-radv.json":   {64, 32, 64},
	"amd-rx5700xt-amdwin.json": {64, 32, 64},
	"amd-rx6600-radv.json":     {64, 32, 64},
	"amd-rx6800xt-amdwin.json": {64, 32, 64},
	"amd-rx7800xt-radv.json":   {64, 32, 64},
	"amd-rx7800xt-amdwin.json": {64, 32, 64},
	"amd-rx9070xt-radv.json":   {64, 32, 64},
	"amd-rx9070xt-amdwin.json": {64, 32, 64},
	// RDNA that cannot pin a size, or whose record hides its range: the
	// driver's, whatever is asked (the products are correct at any size).
	"amd-rx6500xt-amdpal-edgecase.json": {0, 0, 0},
	"amd-rx7900xtx-radv.json":           {0, 0, 0},
	"amd-radeon8060s-radv.json":         {0, 0, 0},
	"amd-radeon8060s-amdvlk.json":       {0, 0, 0},
	"amd-780m-radv.json":                {0, 0, 0},
	// GCN: its one size; AMD's Windows driver lets 64 be pinned.
	"amd-rx580-radv.json":        {0, 0, 0},
	"amd-rx580-amdwin.json":      {0, 0, 64},
	"amd-radeonprovii-radv.json": {0, 0, 0},
	// NVIDIA and Intel: the driver's by default; 32 pinned on request where
	// the stage is listed, 64 impossible (no emulation: the driver's).
	"nvidia-rtx4070-nvidia.json":       {0, 32, 0},
	"nvidia-rtx2070-nvidia-linux.json": {0, 32, 0},
	"nvidia-h200-proprietary.json":     {0, 0, 0},
	"intel-arc-a770-anv.json":          {0, 32, 0},
	"intel-arc-a770-intelwin.json":     {0, 32, 0},
	"intel-irisxe-tgl-anv.json":        {0, 32, 0},
	// lavapipe: subgroups of 8 only.
	"cpu-llvmpipe-lavapipe.json": {0, 0, 0},
	"lavapipe-mesa22.json":       {0, 0, 0},
}

func TestMatVecWaveRecordedDevices(t *testing.T) {
	dir := filepath.Dir(fixtures.Path(t, "devices", "README.md"))
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no device records in %s: %v", dir, err)
	}
	for _, f := range files {
		base := filepath.Base(f)
		want, ok := matVecRecorded[base]
		if !ok {
			t.Errorf("no matrix-vector expectation for %s: add it to the table", base)
			continue
		}
		dev, err := LoadDevice(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, req := range []int{0, 32, 64} {
			if got := MatVecWave(dev, req); got != want[i] {
				t.Errorf("%s: MatVecWave(--wave %d) = %d, want %d", base, req, got, want[i])
			}
		}
	}
	if len(files) != len(matVecRecorded) {
		t.Errorf("%d expectations for %d device records", len(matVecRecorded), len(files))
	}
}

// TestMatVecWaveByProperties: RDNA is told from GCN by its range, not its
// name or default, and the policy never returns a size the device cannot
// pin.
func TestMatVecWaveByProperties(t *testing.T) {
	rdna := Device{VendorID: VendorAMD, Name: "AMD Radeon (RADV GFX1100)", SubgroupSize: 64, MinSubgroupSize: 32, MaxSubgroupSize: 64, SizeControl: true}
	gcn := rdna
	gcn.MinSubgroupSize = 64
	noStage := rdna
	noStage.SizeControl = false
	nvidia := Device{VendorID: VendorNVIDIA, SubgroupSize: 32, MinSubgroupSize: 32, MaxSubgroupSize: 32, SizeControl: true}
	for _, c := range []struct {
		name string
		dev  Device
		want int
	}{{"rdna", rdna, 64}, {"gcn with an rdna name", gcn, 0}, {"rdna without size control", noStage, 0}, {"nvidia", nvidia, 0}} {
		if got := MatVecWave(c.dev, 0); got != c.want {
			t.Errorf("%s: MatVecWave = %d, want %d", c.name, got, c.want)
		}
	}
}
