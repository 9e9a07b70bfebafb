// Package coopmat decides whether prefill's matrix products run on a
// device's matrix cores through VK_KHR_cooperative_matrix, with which
// fragment shapes and at which subgroup size, as a pure function of the
// device's properties. Like the attention package it imports nothing from
// Vulkan: the backend converts its device report into a Device, and tests
// feed it recorded property sets (testdata/*.json, recorded from real
// drivers, and ../shared/testdata/devices).
//
// A cooperative matrix is a fragment of a matrix spread over the lanes of
// one subgroup: A (M×K) × B (K×N) + C (M×N) is one instruction sequence on
// the matrix units (AMD's WMMA from RDNA3 on, NVIDIA's tensor cores, Intel's
// XMX). The driver lists the shapes and component types it runs
// (vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR); the shaders are
// specialised for the one chosen here.
package coopmat

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// PCI vendor ids the policy keys on.
const (
	VendorAMD    = 0x1002
	VendorNVIDIA = 0x10de
	VendorIntel  = 0x8086
)

// Shape is a fragment's size: Result (M×N) = A (M×K) × B (K×N) + C (M×N).
type Shape struct{ M, N, K int }

// IsZero reports whether s is the zero shape, which means "none".
func (s Shape) IsZero() bool { return s == Shape{} }

// String renders the shape as "16x16x16", or "none".
func (s Shape) String() string {
	if s.IsZero() {
		return "none"
	}
	return fmt.Sprintf("%dx%dx%d", s.M, s.N, s.K)
}

// Fragment is one configuration a device offers
// (VkCooperativeMatrixPropertiesKHR).
type Fragment struct {
	M, N, K int
	// A, B, C and Result are component types: "f16", "f32", "f64", "s8",
	// "s16", "s32", "s64", "u8", "u16", "u32", "u64", "bf16", "e4m3",
	// "e5m2".
	A, B, C, Result string
	// Saturating: the multiply-add must saturate (integer entries come
	// in both kinds; the shader has to say which it uses).
	Saturating bool
	// Scope the matrices live in: "subgroup", "workgroup", "device",
	// "queue-family".
	Scope string
}

// Shape is the fragment's size.
func (f Fragment) Shape() Shape { return Shape{f.M, f.N, f.K} }

// String renders the fragment as "16x16x16 f16*f16+f32->f32 (subgroup)".
func (f Fragment) String() string {
	sat := ""
	if f.Saturating {
		sat = " sat"
	}
	return fmt.Sprintf("%s %s*%s+%s->%s%s (%s)", f.Shape(), f.A, f.B, f.C, f.Result, sat, f.Scope)
}

// Device is the part of a device report the policy needs.
type Device struct {
	VendorID, DeviceID uint32
	Name               string
	Driver             string
	// SubgroupSize is the size a compute pipeline gets when it does not
	// require one; MinSubgroupSize..MaxSubgroupSize bound what it may
	// require. SizeControl: a compute pipeline can require a size with
	// full subgroups (subgroupSizeControl, computeFullSubgroups, and the
	// compute stage in requiredSubgroupSizeStages).
	SubgroupSize, MinSubgroupSize, MaxSubgroupSize int
	SizeControl                                    bool
	SharedMemory                                   int // maxComputeSharedMemorySize, bytes
	// MixedDot: the mixed-signedness packed 8-bit dot product is
	// accelerated (integerDotProduct4x8BitPackedMixedSignednessAccelerated).
	// On AMD it arrived with RDNA3, together with the matrix instructions.
	MixedDot bool
	// Shapes are the configurations the device offers for compute
	// shaders, empty without VK_KHR_cooperative_matrix.
	Shapes []Fragment
	// Unusable says why the device's cooperative matrices cannot be used
	// although it has the extension, as the caller found ("" when they
	// can or it lacks the extension), phrased to follow the device's name
	// ("has VK_KHR_cooperative_matrix with its cooperativeMatrix feature
	// off"). Choose gives it as its reason.
	Unusable string
}

// Choice is what the prefill products run on.
type Choice struct {
	// F16 is the fragment shape of the f16 × f16 + f32 products (weights
	// dequantized to f16, activations rounded to f16, f32 accumulators);
	// zero when the device has no usable one, which turns the whole
	// choice off.
	F16 Shape
	// Int8 is an s8 × s8 + s32 shape for products on 8-bit activations;
	// zero when there is none (or F16 is off).
	Int8 Shape
	// Subgroup is the subgroup size the cooperative-matrix pipelines must
	// require, with full subgroups; 0 means the device's default (never
	// returned while On, which always names the size).
	Subgroup int
	// Reason is one line saying why the choice is on or off, phrased to
	// follow the device's name.
	Reason string
}

// On reports whether the prefill products run on cooperative matrices.
func (c Choice) On() bool { return !c.F16.IsZero() }

// String is a short summary: "16x16x16 f16, s8 16x16x16, subgroup 64", or
// "off".
func (c Choice) String() string {
	if !c.On() {
		return "off"
	}
	s := c.F16.String() + " f16"
	if !c.Int8.IsZero() {
		s += ", s8 " + c.Int8.String()
	}
	return fmt.Sprintf("%s, subgroup %d", s, c.Subgroup)
}

// preferred is the fragment shape taken whenever it is offered.
var preferred = Shape{16, 16, 16}

// Choose decides for device d. Its rules, in order:
//
//  1. A device that lists no shapes (no VK_KHR_cooperative_matrix, or the
//     caller found it unusable: Unusable) is off.
//  2. AMD needs RDNA3 or later, told by MixedDot: AMD's own drivers
//     (Windows, AMDVLK) advertise the extension on RDNA1 and RDNA2 too,
//     which have no matrix instructions, so it would be emulated with
//     ordinary vector code (slower than our scalar kernels, which are
//     written for those chips). RDNA3 is also the first AMD generation
//     with the accelerated mixed-signedness dot product, the signal
//     llama.cpp uses for the same purpose (ggml-vulkan.cpp,
//     ggml_vk_khr_cooperative_matrix_support). RADV only offers the
//     extension from RDNA3 on, so there the rule never bites.
//  3. Intel needs Xe2 or later, told by a minimum subgroup size of 16
//     (Xe2 runs SIMD16 at the least; Xe-HPG, the Arc A series, and older
//     report 8). llama.cpp keeps its cooperative-matrix kernels off on the
//     Arc A770 for measured regressions against its other kernels
//     (ggml_vk_khr_cooperative_matrix_support); nobody has measured ours
//     there, so they stay off too.
//  4. The pipelines must be able to require a subgroup size with full
//     subgroups (SizeControl). A fragment is spread over the lanes of one
//     subgroup, and the shaders split a workgroup's tile among its
//     subgroups by their count: they must know the subgroup size when the
//     pipeline is built, and a partial subgroup would hold part of a
//     fragment. llama.cpp asks for full subgroups on every coopmat
//     pipeline and turns its coopmat flash attention off without
//     computeFullSubgroups.
//  5. The size required is the device's default subgroupSize (it must
//     lie within min..max): NVIDIA 32, and on AMD RDNA3/RDNA4 64, its
//     default, rather than the 32 our scalar kernels prefer there. That
//     is the size RADV itself gives a shader using cooperative matrices
//     (it makes such shaders use full subgroups, at its default 64 unless
//     the pipeline requires another) and the one llama.cpp's coopmat
//     kernels run at on RADV and NVIDIA (full subgroups, no required
//     size). On RDNA3 wave64 also costs fewer registers: a 16×16 f32
//     accumulator takes 4 VGPRs per lane instead of 8 (the A and B
//     fragments the same 8), and ACO built a 64×64 tile of four subgroups
//     of 2×2 16x16x16 fragments in 60 VGPRs and 238 instructions at wave64
//     against 96 and 305 at wave32 (RADV null devices, Mesa 25.0.7;
//     navi33, gfx1151 and gfx1201 alike; docs/VULKAN.md). Measured throughput on a
//     real card may revise this rule.
//  6. Only subgroup-scope shapes count: other scopes (workgroup, from
//     NVIDIA's cooperative_matrix2) need a different kind of shader.
//  7. F16: A and B f16, C and Result f32, not saturating. Accumulating in
//     f16 (11 significant bits) over K of 4096 and more loses the
//     precision the scalar kernels and the CPU reference keep with f32
//     sums. 16x16x16 when offered (the only shape RADV offers on RDNA3;
//     one of NVIDIA's several; the shape llama.cpp's coopmat flash
//     attention is written for); else the offered shape with the largest M×N×K (the
//     most work per instruction), ties going to the larger M, then N.
//     Sides must be powers of two, so fragments tile the power-of-two
//     workgroup tiles exactly. A device without such a shape is off.
//  8. Int8: s8 × s8 + s32, not saturating, like the scalar integer
//     kernels' sums (a 32-bit sum of K products of 8-bit values, each at
//     most 128 × 128, cannot overflow below K = 2^17, longer than any
//     real model's rows); subgroup scope, powers of two; F16's shape when
//     offered (the tiles line up), else 16x16x16, else the largest. Zero
//     when there is none; it does not turn F16 off.
func Choose(d Device) Choice {
	if d.Unusable != "" {
		return Choice{Reason: d.Unusable}
	}
	if len(d.Shapes) == 0 {
		return Choice{Reason: "lacks VK_KHR_cooperative_matrix (no cooperative-matrix shapes)"}
	}
	if d.VendorID == VendorAMD && !d.MixedDot {
		return Choice{Reason: "is AMD older than RDNA3 (no accelerated mixed-signedness dot product): no matrix instructions, the driver would emulate them"}
	}
	if d.VendorID == VendorIntel && d.MinSubgroupSize < 16 {
		return Choice{Reason: "is Intel older than Xe2 (subgroups down to 8), where llama.cpp measured cooperative matrices slower than its other kernels; off until measured here"}
	}
	if !d.SizeControl {
		return Choice{Reason: "cannot require a subgroup size with full subgroups in compute shaders, which cooperative-matrix fragments need"}
	}
	lo, hi := d.MinSubgroupSize, d.MaxSubgroupSize
	if lo == 0 || hi == 0 {
		lo, hi = d.SubgroupSize, d.SubgroupSize
	}
	sg := d.SubgroupSize
	if sg <= 0 || sg < lo || sg > hi {
		return Choice{Reason: fmt.Sprintf("has a default subgroup size of %d, outside the sizes it can require (%d..%d)", sg, lo, hi)}
	}
	f16 := pick(d.Shapes, "f16", "f32", Shape{}, preferred)
	if f16.IsZero() {
		return Choice{Reason: "offers no f16*f16+f32->f32 subgroup shape (it has " + summary(d.Shapes) + ")"}
	}
	i8 := pick(d.Shapes, "s8", "s32", f16, preferred)
	c := Choice{F16: f16, Int8: i8, Subgroup: sg}
	c.Reason = fmt.Sprintf("offers %s f16*f16+f32 subgroup fragments and full subgroups of %d, its default size", f16, sg)
	if !i8.IsZero() {
		c.Reason += fmt.Sprintf("; s8*s8+s32 %s", i8)
	}
	return c
}

// Int8Shape is the fragment shape the integer variant of the prefill
// product (matmul_coopmat_i8: 8-bit activations times the weights' integer
// quants, docs/KERNELS.md) runs with under choice c, or the zero shape and
// a reason (phrased to follow the device's name) where it cannot run:
//
//  1. The cooperative matrices must be on (c.On) and offer an s8 x s8 +
//     s32 shape (c.Int8, Choose's rule 8).
//  2. Its K must be 16 or 32. A product sums runs of values that share a
//     weight scale (16 for Q6_K, 32 for the others) and an activation
//     scale (32): K = 16 covers a run of either, K = 32 a run of 32 (and
//     one of 16 staged next to 16 zeros); a longer K would mix values of
//     different scales in one integer sum. The fragments also read their
//     quants as whole 16-byte words.
//
// M and N need nothing beyond Choose's powers of two: the tiles are
// checked against them. Whether the variant is used at all is the
// caller's choice (--coopmat int8), not this function's: it is off by
// default until measured faster than the f16 products. The device must
// also have shaderInt8 (int8 fragments are 8-bit arithmetic), which the
// caller checks from its device report.
func Int8Shape(c Choice) (Shape, string) {
	switch {
	case !c.On():
		return Shape{}, "has no usable cooperative matrices"
	case c.Int8.IsZero():
		return Shape{}, "offers no s8*s8+s32->s32 subgroup shape"
	case c.Int8.K != 16 && c.Int8.K != 32:
		return Shape{}, fmt.Sprintf("offers s8*s8+s32 %s, whose K is neither 16 nor 32 (the integer sums cover one 32-value block of activations)", c.Int8)
	}
	return c.Int8, fmt.Sprintf("offers s8*s8+s32 %s subgroup fragments", c.Int8)
}

// pick returns the best subgroup-scope, non-saturating shape with A = B =
// in and C = Result = acc: first, then second when offered, else the
// largest M×N×K (ties to the larger M, then N). Zero when none qualifies.
func pick(shapes []Fragment, in, acc string, first, second Shape) Shape {
	var best Shape
	found := map[Shape]bool{}
	for _, f := range shapes {
		if f.Scope != "subgroup" || f.A != in || f.B != in || f.C != acc || f.Result != acc || f.Saturating {
			continue
		}
		s := f.Shape()
		if !pow2(s.M) || !pow2(s.N) || !pow2(s.K) {
			continue
		}
		found[s] = true
		if best.IsZero() || larger(s, best) {
			best = s
		}
	}
	for _, s := range []Shape{first, second} {
		if !s.IsZero() && found[s] {
			return s
		}
	}
	return best
}

func larger(a, b Shape) bool {
	va, vb := a.M*a.N*a.K, b.M*b.N*b.K
	if va != vb {
		return va > vb
	}
	if a.M != b.M {
		return a.M > b.M
	}
	return a.N > b.N
}

func pow2(n int) bool { return n > 0 && n&(n-1) == 0 }

// summary lists shapes compactly for a reason line.
func summary(shapes []Fragment) string {
	if len(shapes) == 0 {
		return "none"
	}
	parts := make([]string, len(shapes))
	for i, f := range shapes {
		parts[i] = f.String()
	}
	return strings.Join(parts, ", ")
}

// Recording is a device's properties as recorded into testdata (one JSON
// file per device and driver): Device, plus where it came from.
type Recording struct {
	// Command is how the file was made; DriverInfo and APIVersion
	// identify the driver (Vulkan's driverInfo, the device's version);
	// Date is when (YYYY-MM-DD).
	Command    string
	DriverInfo string
	APIVersion string
	Date       string
	Device     Device
}

// ReadRecording reads a recording written as JSON.
func ReadRecording(path string) (Recording, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Recording{}, err
	}
	var r Recording
	if err := json.Unmarshal(raw, &r); err != nil {
		return Recording{}, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}
