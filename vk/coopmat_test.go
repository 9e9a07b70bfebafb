package vk

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/vkinfer/vkinfer/internal/radvnull"
)

// TestCoopMatLavapipe: Mesa 25.0's lavapipe has no VK_KHR_cooperative_matrix
// (Mesa 26 adds it), so it reports no cooperative matrices, and any device
// without them lists no shapes. Opening with validation on must stay
// silent with the extension's feature struct out of the chain.
func TestCoopMatLavapipe(t *testing.T) {
	devs, err := Devices()
	needVulkan(t, err)
	for _, d := range devs {
		if !d.CoopMatrix && len(d.CoopMatShapes) != 0 {
			t.Errorf("%s: no cooperative matrices, yet %d shapes", d.Name, len(d.CoopMatShapes))
		}
		if d.Driver == "llvmpipe" && strings.HasPrefix(d.DriverInfo, "Mesa 25.") && d.CoopMatrix {
			t.Errorf("%s (%s): CoopMatrix on Mesa 25's lavapipe", d.Name, d.DriverInfo)
		}
	}
	dev := openTest(t)
	info := dev.Info()
	t.Logf("%s: coop matrix %v, shapes %s, memory model %v", info.Name, info.CoopMatrix, CoopMatSummary(info.CoopMatShapes), info.VulkanMemoryModel)
	if !strings.Contains(info.ReportVerbose(), "  coop matrix      ") {
		t.Errorf("ReportVerbose has no coop matrix line:\n%s", info.ReportVerbose())
	}
}

// coopMatChildEnv marks the child process of TestCoopMatNavi31.
const coopMatChildEnv = "VKINFER_COOPMAT_CHILD"

// coopMatReport is what that child reports: the device Open created
// without validation (Plain) and with it (Validated), the validation
// layer's version and its messages.
type coopMatReport struct {
	Plain, Validated DeviceInfo
	LayerVersion     uint32
	Messages         []string
}

// TestCoopMatNavi31 opens RADV's navi31 null device (RDNA3, which has WMMA)
// in a child process (RADV_FORCE_FAMILY must be set before the loader
// starts). It must report cooperative matrices with a 16x16x16 f16 × f16 +
// f32 subgroup shape and the features the cooperative-matrix shaders need,
// and Open must create the device with the extension enabled. Under a
// validation layer that knows the extension the same holds with no
// message; under an older one (Debian 12's 1.3.239) Open leaves the
// extension alone, says why, and the layer stays silent too.
func TestCoopMatNavi31(t *testing.T) {
	if os.Getenv(coopMatChildEnv) == "1" {
		coopMatChild(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestCoopMatNavi31$", "-test.count=1")
	cmd.Env = append(radvnull.Env(t, "navi31"), coopMatChildEnv+"=1", "XDG_CACHE_HOME="+t.TempDir())
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("child: %v\n%s%s", err, out.String(), errb.String())
	}
	_, js, ok := strings.Cut(out.String(), "REPORT ")
	var r coopMatReport
	if !ok || json.Unmarshal([]byte(strings.SplitN(js, "\n", 2)[0]), &r) != nil {
		t.Fatalf("child printed no report:\n%s%s", out.String(), errb.String())
	}
	d := r.Plain
	t.Logf("%s: %s", d.Name, CoopMatSummary(d.CoopMatShapes))
	if d.Name != "Null hardware (RADV NAVI31)" {
		t.Fatalf("opened %q, want the navi31 null device", d.Name)
	}
	want := CoopMatShape{M: 16, N: 16, K: 16, A: "f16", B: "f16", C: "f32", Result: "f32", Scope: "subgroup"}
	if !d.CoopMatrix || !slices.Contains(d.CoopMatShapes, want) || d.CoopMatrixOff != "" {
		t.Errorf("coop matrix %v (off: %q), shapes %v; want %v among them", d.CoopMatrix, d.CoopMatrixOff, d.CoopMatShapes, want)
	}
	if !d.FP16 || !d.Storage16 || !d.VulkanMemoryModel || !d.SizeControl || !d.DotMixedAccelerated {
		t.Errorf("fp16 %v, storage16 %v, memory model %v, size control %v, mixed dot %v: RDNA3 has them all",
			d.FP16, d.Storage16, d.VulkanMemoryModel, d.SizeControl, d.DotMixedAccelerated)
	}
	if !strings.Contains(d.ReportVerbose(), "  coop matrix      16x16x16 f16*f16+f16->f16, 16x16x16 f16*f16+f32->f32, ") {
		t.Errorf("ReportVerbose:\n%s", d.ReportVerbose())
	}

	v := r.Validated
	if r.LayerVersion < coopMatLayerVersion {
		t.Logf("validation layer %s predates the extension: %q", versionString(r.LayerVersion), v.CoopMatrixOff)
		if v.CoopMatrix || len(v.CoopMatShapes) != 0 || !strings.Contains(v.CoopMatrixOff, "predates VK_KHR_cooperative_matrix") {
			t.Errorf("under validation layer %s: coop matrix %v, %d shapes, off %q; want none, saying why",
				versionString(r.LayerVersion), v.CoopMatrix, len(v.CoopMatShapes), v.CoopMatrixOff)
		}
	} else if !v.CoopMatrix || !slices.Equal(v.CoopMatShapes, d.CoopMatShapes) {
		t.Errorf("under validation layer %s: coop matrix %v, shapes %v; want those of the plain device",
			versionString(r.LayerVersion), v.CoopMatrix, v.CoopMatShapes)
	}
	for _, m := range r.Messages {
		t.Errorf("validation: %s", m)
	}
}

// coopMatChild opens the only device without validation and then with it,
// closing each, and prints a report for the parent.
func coopMatChild(t *testing.T) {
	var r coopMatReport
	d, err := Open(Options{Device: 0})
	must(t, err)
	r.Plain = d.Info()
	d.Close()
	d, err = Open(Options{Device: 0, Validation: true})
	must(t, err)
	r.Validated, r.LayerVersion = d.Info(), d.inst.layerVersion
	d.Close()
	r.Messages = d.Messages()
	js, err := json.Marshal(r)
	must(t, err)
	os.Stdout.WriteString("REPORT " + string(js) + "\n")
}

func TestCoopMatSummary(t *testing.T) {
	f16 := CoopMatShape{M: 16, N: 16, K: 16, A: "f16", B: "f16", C: "f32", Result: "f32", Scope: "subgroup"}
	s8 := CoopMatShape{M: 16, N: 16, K: 16, A: "s8", B: "s8", C: "s32", Result: "s32", Saturating: true, Scope: "subgroup"}
	wg := CoopMatShape{M: 64, N: 64, K: 32, A: "f16", B: "f16", C: "f16", Result: "f16", Scope: "workgroup"}
	for _, c := range []struct {
		shapes []CoopMatShape
		want   string
	}{
		{nil, "none"},
		{[]CoopMatShape{f16, s8}, "16x16x16 f16*f16+f32->f32, 16x16x16 s8*s8+s32->s32 sat (subgroup)"},
		{[]CoopMatShape{f16, wg}, "16x16x16 f16*f16+f32->f32 (subgroup), 64x64x32 f16*f16+f16->f16 (workgroup)"},
	} {
		if got := CoopMatSummary(c.shapes); got != c.want {
			t.Errorf("CoopMatSummary(%v) = %q, want %q", c.shapes, got, c.want)
		}
	}
	if componentName(12345) != "type 12345" || scopeName(4) != "scope 4" {
		t.Errorf("unknown values: %q, %q", componentName(12345), scopeName(4))
	}
}
