package attention

import (
	"fmt"
	"strings"
)

// Waves the kernel is built for: a lane group is 32 or 64 lanes.
var waves = []int{32, 64}

// WaveChoice says how a lane group of W lanes runs on a device.
type WaveChoice struct {
	W int // lanes in a lane group (32 or 64)
	// Subgroup is the hardware subgroup size the pipeline runs with. When it
	// equals W the lane group is one hardware subgroup and reduces with
	// subgroup operations; when it is smaller the lane group spans W/Subgroup
	// subgroups and reductions that cross them go through shared memory.
	Subgroup int
	// Require asks for requiredSubgroupSize = Subgroup with full subgroups
	// when the pipeline is created. Without it the pipeline gets the device's
	// default size, which then equals Subgroup.
	Require bool
}

// Native reports whether the lane group is exactly one hardware subgroup.
func (c WaveChoice) Native() bool { return c.W == c.Subgroup }

func (c WaveChoice) String() string {
	how := "default"
	if c.Require {
		how = "required"
	}
	if c.Native() {
		return fmt.Sprintf("wave%d (native, subgroup %d %s)", c.W, c.Subgroup, how)
	}
	return fmt.Sprintf("wave%d (emulated: %d subgroups of %d, %s)", c.W, c.W/c.Subgroup, c.Subgroup, how)
}

// ParseWave reads a --wave value: "32", "64", or "auto" (or "") for the
// device's default, returned as 0.
func ParseWave(s string) (int, error) {
	switch strings.TrimSpace(strings.ToLower(s)) {
	case "", "auto":
		return 0, nil
	case "32":
		return 32, nil
	case "64":
		return 64, nil
	}
	return 0, fmt.Errorf("--wave %q: want 32, 64 or auto", s)
}

// canNative reports whether a pipeline on dev can run with hardware
// subgroups of exactly n lanes: by requiring n, or because n is the default.
func canNative(dev Device, n int) bool {
	lo, hi := dev.subgroupRange()
	return (dev.SizeControl && lo <= n && n <= hi) || dev.SubgroupSize == n
}

// Wave is the default lane-group width for a device and whether it runs
// natively (one lane group = one hardware subgroup).
//
//   - AMD RDNA → 32. RDNA and GCN both report a default subgroup size of 64,
//     so they are told apart by minSubgroupSize (32 on RDNA, 64 on GCN), never
//     by name. An RDNA driver that cannot pin the compute stage to 32 (an
//     empty requiredSubgroupSizeStages) gets 64, its default.
//   - AMD GCN → 64.
//   - Everything else → its native width: the default subgroup size when it is
//     32 or 64 (NVIDIA 32; Intel 32, which is also its maximum: the widest
//     size it runs means the fewest lanes per reduction step and matches what
//     its drivers pick by default). A device whose subgroups are narrower
//     than 32 and cannot be widened (lavapipe: 8) runs wave32 emulated, the
//     smallest lane group the kernel has, so the fewest reductions cross
//     subgroups.
func Wave(dev Device) (w int, native bool) {
	lo, _ := dev.subgroupRange()
	switch {
	case dev.VendorID == VendorAMD:
		w = 64
		if lo == 32 && canNative(dev, 32) {
			w = 32
		}
	case dev.SubgroupSize == 32 || dev.SubgroupSize == 64:
		w = dev.SubgroupSize
	case canNative(dev, 32):
		w = 32
	case canNative(dev, 64):
		w = 64
	default:
		w = 32
	}
	return w, canNative(dev, w)
}

// ChooseWave resolves a requested lane-group width (0 = the policy's default,
// else 32 or 64) against a device. W runs natively when the device can pin
// its subgroups to W (size control with min <= W <= max) or W is its default
// size. Otherwise the lane group is emulated over the widest hardware
// subgroup that divides W. It is an error only when W cannot run even so:
// W exceeds the workgroup limit, or no available subgroup size divides W.
func ChooseWave(dev Device, request int) (WaveChoice, error) {
	w := request
	if w == 0 {
		w, _ = Wave(dev)
	}
	if w != 32 && w != 64 {
		return WaveChoice{}, fmt.Errorf("wave %d: the kernel runs lane groups of 32 or 64", w)
	}
	if c, ok := resolve(dev, w); ok {
		return c, nil
	}
	return WaveChoice{}, waveError(dev, w)
}

// resolve finds how lane groups of w lanes run on dev, if they can.
func resolve(dev Device, w int) (WaveChoice, bool) {
	if w > dev.maxInvocations() {
		return WaveChoice{}, false
	}
	lo, hi := dev.subgroupRange()
	if dev.SizeControl && lo <= w && w <= hi {
		return WaveChoice{W: w, Subgroup: w, Require: true}, true
	}
	if dev.SubgroupSize == w {
		return WaveChoice{W: w, Subgroup: w}, true
	}
	if dev.SizeControl {
		// Pin the widest size that divides w: fewest subgroups per lane
		// group, and a pinned size guarantees full subgroups.
		for s := w / 2; s >= 1; s /= 2 {
			if lo <= s && s <= hi {
				return WaveChoice{W: w, Subgroup: s, Require: true}, true
			}
		}
	}
	if s := dev.SubgroupSize; s > 0 && s < w && w%s == 0 {
		return WaveChoice{W: w, Subgroup: s}, true
	}
	return WaveChoice{}, false
}

// SupportedWaves lists the lane-group widths dev can run, natively or not.
func SupportedWaves(dev Device) []WaveChoice {
	var out []WaveChoice
	for _, w := range waves {
		if c, ok := resolve(dev, w); ok {
			out = append(out, c)
		}
	}
	return out
}

func waveError(dev Device, w int) error {
	lo, hi := dev.subgroupRange()
	sizes := fmt.Sprintf("subgroup sizes %d..%d (default %d, size control %v)", lo, hi, dev.SubgroupSize, dev.SizeControl)
	if lo == 0 {
		sizes = "no subgroup size reported"
	}
	var ok []string
	for _, c := range SupportedWaves(dev) {
		ok = append(ok, c.String())
	}
	offers := "none"
	if len(ok) > 0 {
		offers = strings.Join(ok, ", ")
	}
	return fmt.Errorf("wave %d is not possible on %s: %s, at most %d invocations per workgroup; it supports: %s",
		w, name(dev), sizes, dev.maxInvocations(), offers)
}

func name(dev Device) string {
	if dev.Name != "" {
		return dev.Name
	}
	return fmt.Sprintf("device %#x:%#x", dev.VendorID, dev.DeviceID)
}

// MatVecWave is the subgroup size the decode matrix-vector products
// (matvec, matvec_q8, matvec_stack) require on dev for a --wave request
// (0: the policy's), or 0 for the driver's choice. Their workgroups of 32
// to 128 lanes reduce across subgroups through shared memory, so unlike
// flash attention they are correct at any subgroup size and never emulate
// one: a request the device cannot pin (64 on NVIDIA, anything on
// lavapipe or where requiredSubgroupSizeStages lacks compute) leaves the
// driver's.
//
//   - AMD RDNA (minSubgroupSize 32, size control) → 64. Read from the AMD
//     compile matrix (docs/AMD.md, "The matrix-vector wave"): RDNA caps a
//     SIMD at 16 waves (20 on RDNA1) of either size, and at wave64 ACO
//     needs no more registers per lane than at wave32, so wave64 keeps as
//     many lanes, and bytes of weights, in flight on RDNA1 and up to twice
//     as many on RDNA2-4 (navi31's 8-bit products: 16 wave64 against 16
//     wave32 per SIMD).
//   - Everything else → the driver's choice. GCN and NVIDIA have one size;
//     Intel's compiler picks SIMD8/16/32 per shader by register pressure,
//     and pinning 32 there would override it unmeasured.
func MatVecWave(dev Device, request int) int {
	lo, hi := dev.subgroupRange()
	w := request
	if w == 0 {
		if dev.VendorID != VendorAMD || lo != 32 {
			return 0
		}
		w = rdnaMatVecWave
	}
	if dev.SizeControl && lo <= w && w <= hi {
		return w
	}
	return 0
}

// rdnaMatVecWave is MatVecWave's choice on RDNA.
const rdnaMatVecWave = 64
