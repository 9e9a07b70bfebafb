package flashattn

import (
	"fmt"
	"github.com/vkinfer/vkinfer/internal/vktest"
	"math"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/vkinfer/vkinfer/attention"
	"github.com/vkinfer/vkinfer/coopmat"
	"github.com/vkinfer/vkinfer/internal/radvnull"
	"github.com/vkinfer/vkinfer/vk"
	"github.com/vkinfer/vkinfer/vk/kernels"
)

// coopCase is one problem for the cooperative-matrix kernel, with its
// q-heads per workgroup and tile width forced when not 0.
type coopCase struct {
	inputs
	hg, bc int
}

func (c coopCase) String() string {
	s := fmt.Sprintf("d%d/gqa%d/kvheads%d/kv%d/q%d/pos%d/mask=%v", c.dim, c.gqa, c.kvHeads, c.kv, c.queries, c.pos(), c.mask)
	if c.past > 0 {
		s += fmt.Sprintf("/past%d", c.past)
	}
	if c.window > 0 {
		s += fmt.Sprintf("/window%d", c.window)
	}
	if c.rising {
		s += "/rising"
	}
	if c.hg > 0 {
		s += fmt.Sprintf("/heads%d", c.hg)
	}
	if c.bc > 0 {
		s += fmt.Sprintf("/bc%d", c.bc)
	}
	return s
}

// coopCases are the awkward sizes: 16, 17, 31 and 100 queries; key counts
// that leave partial tiles; batches at positions past 0 and past the
// cache's end; GQA groups of 1, 4 and 8 over one to three KV heads; head
// dims 64, 80, 96 and 128; with and without a mask (maskFor: a fully
// masked tile of keys 32..63, and a fully masked query row); scores that
// keep passing the running max; one, two, four and eight q-heads per workgroup
// (the policy takes as many as fit; eight stage Q in rounds); tiles of 16;
// sliding windows over rings that have wrapped (of exactly window+queries-1
// rows, and looser) and over a cache of every position.
var coopCases = []coopCase{
	{inputs: inputs{dim: 64, gqa: 1, kvHeads: 1, kv: 16, queries: 16}},
	{inputs: inputs{dim: 64, gqa: 1, kvHeads: 1, kv: 17, queries: 16, mask: true}},
	{inputs: inputs{dim: 64, gqa: 4, kvHeads: 1, kv: 255, queries: 17, mask: true}},
	{inputs: inputs{dim: 128, gqa: 8, kvHeads: 1, kv: 100, queries: 31}},
	{inputs: inputs{dim: 128, gqa: 1, kvHeads: 2, kv: 1000, queries: 100, mask: true}},
	{inputs: inputs{dim: 128, gqa: 4, kvHeads: 1, kv: 300, queries: 100, rising: true}},
	{inputs: inputs{dim: 80, gqa: 4, kvHeads: 2, kv: 300, queries: 100}},
	{inputs: inputs{dim: 96, gqa: 8, kvHeads: 2, kv: 70, queries: 31, mask: true}},
	{inputs: inputs{dim: 64, gqa: 2, kvHeads: 3, kv: 90, queries: 16, past: 10}},
	{inputs: inputs{dim: 64, gqa: 8, kvHeads: 1, kv: 200, queries: 31, mask: true}, hg: 2},
	{inputs: inputs{dim: 32, gqa: 4, kvHeads: 2, kv: 150, queries: 33, past: 5}, hg: 4},
	{inputs: inputs{dim: 128, gqa: 4, kvHeads: 1, kv: 90, queries: 17, mask: true}, hg: 1},
	{inputs: inputs{dim: 64, gqa: 1, kvHeads: 1, kv: 255, queries: 31, mask: true}, bc: 16},
	{inputs: inputs{dim: 128, gqa: 4, kvHeads: 1, kv: 129, queries: 100, mask: true}, bc: 16},
	{inputs: inputs{dim: 64, gqa: 4, kvHeads: 1, kv: 30, queries: 16, past: 77, window: 15}},
	{inputs: inputs{dim: 128, gqa: 2, kvHeads: 2, kv: 170, queries: 100, past: 900, window: 40, mask: true}},
	{inputs: inputs{dim: 96, gqa: 1, kvHeads: 1, kv: 1000, queries: 31, window: 7}, bc: 16},
}

// TestFlashAttnCoopEmulated runs the cooperative-matrix kernel built
// against the software emulation of the fragment operations on the
// validated device (lavapipe in CI) against the float64 reference.
func TestFlashAttnCoopEmulated(t *testing.T) {
	d := setup(t)
	if !d.Info().FP16 {
		t.Logf("nothing to check: %s has no f16 arithmetic", d.Info().Name)
		return
	}
	if why := vktest.CoopEmulationBroken(d); why != "" {
		t.Logf("not checked: %s", why)
		return
	}
	runCoop(t, d, Options{CoopEmulated: true}, coopCases)
}

// TestFlashAttnCoopFallback checks where Record keeps the scalar kernel
// with the emulated kernel on: batches below CoopMinQueries, head dims off
// the fragment shape, and an 8-bit output; and that those still match the
// reference.
func TestFlashAttnCoopFallback(t *testing.T) {
	d := setup(t)
	fa, err := New(d, Options{CoopEmulated: true})
	if err != nil {
		t.Fatal(err)
	}
	defer fa.Close()
	for _, sh := range []Shape{
		{Queries: 15, Heads: 4, KVHeads: 1, HeadDim: 64, Context: 100},
		{Queries: 1, Heads: 4, KVHeads: 1, HeadDim: 64, Context: 100},
		{Queries: 32, Heads: 4, KVHeads: 1, HeadDim: 72, Context: 100},
	} {
		if p, err := fa.CoopPlan(sh); err == nil {
			t.Errorf("%+v: cooperative-matrix plan %v, want the scalar kernel", sh, p)
		}
		specs, err := fa.Specs(sh, false)
		if err != nil || len(specs) == 0 || specs[0].Name == "flash_attn_coopmat_emu" {
			t.Errorf("%+v: specs %v (%v), want the scalar kernel's", sh, specs, err)
		}
	}
	sh := Shape{Queries: 32, Heads: 4, KVHeads: 1, HeadDim: 64, Context: 100}
	p, err := fa.CoopPlan(sh)
	if err != nil {
		t.Fatal(err)
	}
	if specs, err := fa.Specs(sh, false); err != nil || len(specs) != 1 || specs[0].Name != p.Shader() {
		t.Errorf("%+v: specs %v (%v), want %s alone", sh, specs, err, p.Shader())
	}
	if fa.WritesQ8(sh) {
		t.Errorf("%+v: WritesQ8 with the cooperative-matrix kernel", sh)
	}
	if specs, err := fa.Specs(sh, true); err != nil || specs[0].Name == p.Shader() {
		t.Errorf("%+v: specs with 8-bit output %v (%v), want the scalar kernel's", sh, specs, err)
	}
	runCoop(t, d, Options{CoopEmulated: true}, []coopCase{
		{inputs: inputs{dim: 64, gqa: 4, kvHeads: 1, kv: 100, queries: 15, mask: true}},
		{inputs: inputs{dim: 72, gqa: 2, kvHeads: 2, kv: 100, queries: 32}},
	})
}

// TestCoopTilePreferred: Options.CoopTile's tile is planned where the
// shape and the device take it, a q-heads or keys count alone picks the
// order's tiles of it, and a tile that does not fit falls back to the
// order's first that does (a tuning profile made on another model or
// device must not cost the matrix units).
func TestCoopTilePreferred(t *testing.T) {
	d := setup(t)
	sh := Shape{Queries: 32, Heads: 8, KVHeads: 2, HeadDim: 64, Context: 100} // GQA 4
	policy, err := New(d, Options{CoopEmulated: true})
	if err != nil {
		t.Fatal(err)
	}
	defer policy.Close()
	base, err := policy.CoopPlan(sh)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		tile CoopTile
		want CoopTile // the zero tile: the policy's
	}{
		{CoopTile{2, 32}, CoopTile{2, 32}},
		{CoopTile{1, 16}, CoopTile{1, 16}},
		{CoopTile{Heads: 2}, CoopTile{2, 32}},
		{CoopTile{Bc: 16}, CoopTile{1, 16}},
		{CoopTile{3, 32}, CoopTile{}},  // 3 does not divide the group
		{CoopTile{4, 256}, CoopTile{}}, // 256 keys of 64 dims fit no 48 KiB
		{CoopTile{2, 24}, CoopTile{}},  // not whole fragments
		{CoopTile{-1, 32}, CoopTile{}}, // out of range
	} {
		fa, err := New(d, Options{CoopEmulated: true, CoopTile: c.tile})
		if err != nil {
			t.Fatal(err)
		}
		p, err := fa.CoopPlan(sh)
		fa.Close()
		want := c.want
		if want == (CoopTile{}) {
			want = CoopTile{base.Heads, base.Bc}
		}
		if err != nil || (CoopTile{p.Heads, p.Bc}) != want {
			t.Errorf("tile %v: plan %v (%v), want %v", c.tile, p, err, want)
		}
	}
	if base.Heads != 4 {
		t.Errorf("policy plan %v: want 4 q-heads, the order's first that fits lavapipe", base)
	}
}

// runCoop runs each case alone with options o and checks it against the
// reference; cases the cooperative-matrix kernel does not take run the
// scalar one (and must still pass).
func runCoop(t *testing.T, d *vk.Device, o Options, cases []coopCase) {
	t.Helper()
	start := time.Now()
	worst, worstCase := 0.0, ""
	for _, c := range cases {
		o.CoopTile = CoopTile{c.hg, c.bc}
		fa, err := New(d, o)
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		e, plan, err := runCoopCase(t, d, fa, c)
		fa.Close()
		if err != nil {
			t.Errorf("%v: %v", c, err)
			continue
		}
		t.Logf("%v: %s: rel err %.2e, %v", c, plan, e, time.Since(t0).Round(time.Millisecond))
		if e > worst {
			worst, worstCase = e, c.String()
		}
	}
	t.Logf("%d cases in %v, worst relative error %.2e (%s)", len(cases), time.Since(start).Round(time.Millisecond), worst, worstCase)
}

func runCoopCase(t *testing.T, d *vk.Device, fa *FlashAttn, c coopCase) (float64, string, error) {
	sh := Shape{Queries: c.queries, Heads: c.heads(), KVHeads: c.kvHeads, HeadDim: c.dim,
		Context: c.context(), Window: c.window, Scale: float32(1 / math.Sqrt(float64(c.dim))), Mask: c.mask}
	plan := ""
	tol := 1e-3
	if cp, err := fa.CoopPlan(sh); err == nil {
		plan, tol = cp.String(), CoopRelErr
		if c.hg > 0 && cp.Heads != c.hg || c.bc > 0 && cp.Bc != c.bc {
			return 0, plan, fmt.Errorf("plan %v does not honour heads %d, bc %d", cp, c.hg, c.bc)
		}
	} else if sh.Queries >= CoopMinQueries && sh.HeadDim%16 == 0 {
		return 0, "", fmt.Errorf("no cooperative-matrix plan: %v", err)
	} else {
		p, err := fa.Plan(sh)
		if err != nil {
			return 0, "", err
		}
		plan = "scalar " + p.String()
	}
	p := &planned{tc: tc{inputs: c.inputs}, outN: 4 * int64(c.queries*c.heads()*c.dim)}
	scr, err := fa.ScratchBytes(sh) // the scalar kernel's split partials
	if err != nil {
		return 0, plan, err
	}
	p.scratch, p.scrN = alignUp(p.outN), scr
	inBuf := buffer(t, d, inputData(c.inputs))
	outBuf := buffer(t, d, nanBytes(p.scratch+p.scrN))
	s := d.NewSequence()
	defer s.Free()
	if err := fa.Record(s, p.io(inBuf, outBuf), sh); err != nil {
		return 0, plan, err
	}
	if err := s.End(); err != nil {
		return 0, plan, err
	}
	if err := s.Run(); err != nil {
		return 0, plan, err
	}
	got := make([]float32, p.outN/4)
	if err := outBuf.ReadF32(0, got); err != nil {
		return 0, plan, err
	}
	want, err := attention.Reference(problem(c.inputs))
	if err != nil {
		return 0, plan, err
	}
	e := attention.RelErr(got, want, c.dim)
	if !(e < tol) {
		return e, plan, fmt.Errorf("%s: relative error %.3e >= %.0e", plan, e, tol)
	}
	return e, plan, nil
}

const coopNullChild = "VKINFER_FLASHATTN_COOP_NULL_CHILD"

// TestFlashAttnCoopCompilesNavi31 builds the cooperative-matrix kernel on
// the device's matrix units with AMD's compiler, through RADV's navi31
// (RDNA3) null device in a child process: the policy's 16x16x16 fragments
// at its subgroup size (64) and at 32, GQA groups of 4 (head dims 64, 128
// and 256) and of 8 (64 and 128: the 8-head tile), with and without a
// mask. Nothing runs there; the pipelines must build without a spilled
// VGPR (the tile policy keeps the plans within the registers).
func TestFlashAttnCoopCompilesNavi31(t *testing.T) {
	if os.Getenv(coopNullChild) == "1" {
		coopNullDevice(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestFlashAttnCoopCompilesNavi31$", "-test.count=1", "-test.v")
	cmd.Env = append(radvnull.Env(t, "navi31"), coopNullChild+"=1", "XDG_CACHE_HOME="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS") {
		t.Fatalf("child: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "coopmat ") {
			t.Log(strings.TrimSpace(line))
		}
	}
}

// coopNullDevice builds the pipelines on the null device.
func coopNullDevice(t *testing.T) {
	d, err := vk.Open(vk.Options{Device: 0})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	info := d.Info()
	if !strings.Contains(info.Name, "NAVI31") {
		t.Fatalf("device %q, want RADV's navi31 null device", info.Name)
	}
	choice := coopChoice(info)
	if !choice.On() || choice.F16 != (coopmat.Shape{M: 16, N: 16, K: 16}) {
		t.Fatalf("cooperative matrices %v on %s, want 16x16x16 fragments", choice, info.Name)
	}
	// The policy's subgroup (the device's default, 64), and wave32.
	for _, sg := range []int{choice.Subgroup, 32} {
		c := choice
		c.Subgroup = sg
		coopNullPipelines(t, d, c)
	}
}

func coopNullPipelines(t *testing.T, d *vk.Device, choice coopmat.Choice) {
	fa, err := New(d, Options{Coop: choice})
	if err != nil {
		t.Fatal(err)
	}
	defer fa.Close()
	for _, c := range []struct{ kvHeads, dim int }{{8, 64}, {8, 128}, {8, 256}, {4, 64}, {4, 128}} {
		for _, mask := range []bool{false, true} {
			sh := Shape{Queries: 512, Heads: 32, KVHeads: c.kvHeads, HeadDim: c.dim, Context: 4096, Mask: mask}
			p, err := fa.CoopPlan(sh)
			if err != nil {
				t.Fatal(err)
			}
			pipe, err := fa.pipeline(coopSpec(p))
			if err != nil {
				t.Fatalf("%v: %v", p, err)
			}
			stats := ""
			if st, err := pipe.Statistics(); err == nil {
				for _, s := range st {
					v := s.Uint + uint64(s.Int)
					switch s.Name {
					case "VGPRs", "SGPRs", "LDS size", "Spilled VGPRs", "Spilled SGPRs", "Scratch size":
						stats += fmt.Sprintf(" %s=%d", s.Name, v)
					}
					if s.Name == "Spilled VGPRs" && v > 0 {
						t.Errorf("gqa%d mask=%v %v: %d VGPRs spilled", sh.Heads/sh.KVHeads, mask, p, v)
					}
				}
			}
			t.Logf("gqa%d mask=%v %v:%s", sh.Heads/sh.KVHeads, mask, p, stats)
		}
	}
}

// coopChoice is the cooperative-matrix policy's choice for a device, as
// the engine makes it.
func coopChoice(info vk.DeviceInfo) coopmat.Choice { return coopmat.Choose(kernels.CoopDevice(info)) }

// TestFlashAttnCoopDevice runs the cases of TestFlashAttnCoopEmulated on
// the real kernel, on the matrix units, where the device has cooperative
// matrices (the policy's choice); elsewhere it has nothing to run.
func TestFlashAttnCoopDevice(t *testing.T) {
	d := setup(t)
	choice := coopChoice(d.Info())
	if !choice.On() {
		// Not a skip: CI's lavapipe never has the extension, and the
		// emulated test covers the kernel's logic there.
		t.Logf("%s: no cooperative matrices (%s); nothing to run", d.Info().Name, choice.Reason)
		return
	}
	runCoop(t, d, Options{Coop: choice}, coopCases)
}
