package flashattn

import (
	"fmt"

	"github.com/vkinfer/vkinfer/attention"
	"github.com/vkinfer/vkinfer/coopmat"
	"github.com/vkinfer/vkinfer/shaders"
	"github.com/vkinfer/vkinfer/vk"
)

// CoopPlan is the geometry of the cooperative-matrix prefill kernel
// (shaders/glsl/flash_attn_coopmat.glsl): S = Q·Kᵀ and O += P·V on the
// matrix units in fragments of Shape, each subgroup owning one block of
// Shape.M query rows, the online softmax in f32 by that subgroup's lanes.
type CoopPlan struct {
	// Emulated runs flash_attn_coopmat_emu, the kernel built against
	// coopmat.glsl's software emulation of the fragment operations: virtual
	// subgroups of Subgroup invocations, whatever the hardware's.
	Emulated bool
	Shape    coopmat.Shape // fragment M x N x K
	// Subgroup is the invocations per subgroup: the hardware subgroup size
	// the pipeline requires, or the emulation's virtual one.
	Subgroup  int
	Subgroups int // per workgroup, one block of Shape.M rows each
	HeadDim   int
	Br        int // query positions per workgroup, a multiple of Shape.M
	Heads     int // q-heads per workgroup, sharing one KV head
	Bc        int // keys per tile
	// Splits cuts each workgroup's keys into this many runs of whole
	// tiles, one workgroup each (z), whose partials flash_attn_reduce
	// merges; 1: no split.
	Splits int
	Mask   bool
	// SharedBytes is the shared memory the kernel declares.
	SharedBytes int
}

// Lanes is the workgroup size.
func (p CoopPlan) Lanes() int { return p.Subgroups * p.Subgroup }

// Rows is the query rows a workgroup owns: Br positions of Heads q-heads.
func (p CoopPlan) Rows() int { return p.Br * p.Heads }

// Shader is the kernel the plan runs.
func (p CoopPlan) Shader() string {
	if p.Emulated {
		return "flash_attn_coopmat_emu"
	}
	return "flash_attn_coopmat"
}

// Workgroups is the dispatch grid for a shape: query blocks × head groups
// × splits.
func (p CoopPlan) Workgroups(sh Shape) (x, y, z int) {
	return (sh.Queries + p.Br - 1) / p.Br, sh.KVHeads * (sh.Heads / sh.KVHeads / p.Heads), p.Splits
}

func (p CoopPlan) String() string {
	e := ""
	if p.Emulated {
		e = " emulated"
	}
	return fmt.Sprintf("coopmat%s %dx%dx%d: d=%d br=%d heads=%d bc=%d splits=%d %d subgroups of %d, %d B shared",
		e, p.Shape.M, p.Shape.N, p.Shape.K, p.HeadDim, p.Br, p.Heads, p.Bc, p.Splits, p.Subgroups, p.Subgroup, p.SharedBytes)
}

// coopShared is the shared memory of flash_attn_coopmat.glsl's arrays
// for a plan (keep in step with the shader's declarations).
func coopShared(p CoopPlan) int {
	m, bc := p.Shape.M, p.Bc
	n := 2 * bc * (p.HeadDim + 8) * 2 // shKV (f16)
	if coopQReg(p.HeadDim) {
		n += 16 // shQ's placeholder
	} else {
		n += p.Rows() * (p.HeadDim + 8) * 2
	}
	n += p.Subgroups * bc * (m + 4) * 4 // shS
	n += p.Subgroups * m * (bc + 8) * 2 // shP
	n += p.Subgroups * m * 4            // shR
	n += p.Lanes() * 4                  // red
	if p.Mask {
		n += (p.Br*(bc+1) + 3) / 4 * 16 // mtile, whole 16-byte units
	} else {
		n += 16
	}
	return n + 16 // mlive4
}

// coopQReg says whether the kernel keeps Q's fragments in registers
// (QREG in flash_attn_coopmat.glsl): for head dims up to 128; wider ones
// would spill on RDNA3.
func coopQReg(headDim int) bool { return headDim <= 128 }

// CoopMinQueries is the least batch the cooperative-matrix kernel runs:
// below it the scalar kernel's narrower tiles waste less.
const CoopMinQueries = 16

// coopTile is a workgroup's subgroups (each a block of the fragment's M
// query rows) and keys per tile. Its q-heads are as many of the GQA group
// as divide the subgroups: they share the K/V tiles, and fewer positions
// per workgroup skip more of the causal triangle.
type coopTile struct{ subgroups, bc int }

// coopTiles are the geometries tried, in order: the first that the head
// dim and the device's shared memory and invocations allow.
var coopTiles = []coopTile{{4, 32}, {4, 16}, {2, 32}, {2, 16}, {1, 16}}

// CoopPlan is the cooperative-matrix kernel's geometry for sh, or an error
// saying why Record runs the scalar kernel instead: the kernel is off
// (Options.Coop and CoopEmulated), the batch is shorter than
// CoopMinQueries, the head dim is not a multiple of the fragment shape,
// or no tile fits the device's shared memory.
func (f *FlashAttn) CoopPlan(sh Shape) (CoopPlan, error) {
	p := CoopPlan{Emulated: f.coopEmu, HeadDim: sh.HeadDim, Mask: sh.Mask, Heads: 1}
	switch {
	case f.coopEmu:
		p.Shape, p.Subgroup = coopmat.Shape{M: 16, N: 16, K: 16}, coopEmuSubgroup
		if f.coopSubgroup > 0 {
			p.Subgroup = f.coopSubgroup
		}
		if f.coop.F16.M > 0 {
			p.Shape = f.coop.F16
		}
	case f.coop.On():
		p.Shape, p.Subgroup = f.coop.F16, f.coop.Subgroup
		if p.Subgroup == 0 {
			p.Subgroup = f.dev.SubgroupSize
		}
	default:
		return p, fmt.Errorf("flashattn: cooperative matrices off (%s)", f.coop.Reason)
	}
	if err := sh.check(); err != nil {
		return p, err
	}
	if sh.Rows {
		return p, fmt.Errorf("flashattn: rows of their own sequences run on the decode kernel")
	}
	s := p.Shape
	switch {
	case s.M < 1 || s.N < 1 || s.K < 1:
		return p, fmt.Errorf("flashattn: no f16 fragment shape (%v)", s)
	case sh.Queries < CoopMinQueries:
		return p, fmt.Errorf("flashattn: %d queries, the cooperative-matrix kernel takes %d or more", sh.Queries, CoopMinQueries)
	case sh.HeadDim%s.N != 0 || sh.HeadDim%s.K != 0 || sh.HeadDim%8 != 0:
		return p, fmt.Errorf("flashattn: head dim %d is not a multiple of the fragment's N %d and K %d", sh.HeadDim, s.N, s.K)
	case sh.KVHeads < 1 || sh.Heads%sh.KVHeads != 0:
		return p, fmt.Errorf("flashattn: %d heads over %d KV heads", sh.Heads, sh.KVHeads)
	case !f.info.FP16:
		return p, fmt.Errorf("flashattn: %s has no f16 arithmetic", f.info.Name)
	}
	group := sh.Heads / sh.KVHeads
	if h := f.coopHeads; h > 0 && group%h != 0 {
		return p, fmt.Errorf("flashattn: %d q-heads per workgroup do not divide the group of %d", h, group)
	}
	tiles := coopTiles
	if h := f.coopHeads; h > 0 || f.coopBc > 0 {
		sgs := 4
		if h > 0 && sgs%h != 0 {
			sgs = h
		}
		tiles = []coopTile{{sgs, f.coopBc}}
		if f.coopBc == 0 {
			tiles = []coopTile{{sgs, 32}, {sgs, 16}}
		}
	}
	for _, t := range tiles {
		if t.bc%s.N != 0 || t.bc%s.K != 0 {
			continue
		}
		q := p
		q.Subgroups, q.Bc = t.subgroups, t.bc
		q.Heads = gcd(group, t.subgroups)
		if f.coopHeads > 0 {
			q.Heads = f.coopHeads
		}
		q.Br = t.subgroups * s.M / q.Heads
		if q.Lanes() > f.info.MaxWorkgroupInvocations {
			continue
		}
		q.SharedBytes = coopShared(q)
		if q.SharedBytes <= f.info.SharedMemory {
			q.Splits = f.coopSplits(q, sh)
			return q, nil
		}
	}
	return p, fmt.Errorf("flashattn: no tile of %v (subgroups, keys) fits the device's %d bytes of shared memory and %d invocations at head dim %d", tiles, f.info.SharedMemory, f.info.MaxWorkgroupInvocations, sh.HeadDim)
}

// coopSplits is the split count for plan p: enough workgroups for
// coopWorkgroupsPerCU on every compute unit, each split at least two
// tiles. A subgroup owns 16 query rows for the whole walk, so a 512-query
// prefill is only 1024 subgroups of work over every head, too few to hide
// the latency of each tile's dependent steps on a large GPU.
func (f *FlashAttn) coopSplits(p CoopPlan, sh Shape) int {
	if f.coopSplit > 0 {
		return f.coopSplit
	}
	cus := f.dev.ComputeUnits
	if cus == 0 {
		cus = 32
	}
	x, y, _ := p.Workgroups(sh)
	target := coopWorkgroupsPerCU * cus
	kv := sh.policy().KVLen
	n := min((target+x*y-1)/(x*y), kv/(2*p.Bc), attention.MaxSplits)
	if n <= 1 {
		return 1
	}
	// Each split takes whole tiles (key_range), so a count whose shares
	// round up would leave the last splits empty.
	share := ((kv+n-1)/n + p.Bc - 1) / p.Bc * p.Bc
	return (kv + share - 1) / share
}

// coopWorkgroupsPerCU is the workgroups per compute unit the splits aim
// for.
const coopWorkgroupsPerCU = 8

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// coopEmuSubgroup is the emulation's virtual subgroup: lavapipe's 8-wide
// subgroups.
const coopEmuSubgroup = 8

// coopSpec is the plan's pipeline: flash_attn.glsl's constants (row slots,
// chunk, split and staging unused), then the fragment shape.
func coopSpec(p CoopPlan) vk.PipelineSpec {
	sg := p.Subgroup
	if p.Emulated {
		sg = 0
	}
	return vk.PipelineSpec{Name: p.Shader(), SPIRV: shaders.SPIRV(p.Shader()), Bindings: 7, PushSize: pushBytes,
		SubgroupSize: sg,
		Spec: []uint32{uint32(p.HeadDim), uint32(p.Lanes()), uint32(p.Subgroup), uint32(p.Br), uint32(p.Heads),
			uint32(p.Bc), 1, 8, b32(p.Mask), b32(p.Splits > 1), 0, uint32(p.Shape.M), uint32(p.Shape.N), uint32(p.Shape.K)}}
}

// recordCoop records the cooperative-matrix kernel: one dispatch.
func (f *FlashAttn) recordCoop(s *vk.Sequence, io IO, sh Shape, p CoopPlan) error {
	gx, gy, gz := p.Workgroups(sh)
	if lim := f.info.MaxWorkgroupCount; gx > int(lim[0]) || gy > int(lim[1]) || gz > int(lim[2]) ||
		p.Splits > 1 && (sh.Heads > int(lim[0]) || sh.Queries > int(lim[1])) {
		return fmt.Errorf("flashattn: %d×%d×%d workgroups exceed the device's grid %v", gx, gy, gz, lim)
	}
	qBytes := 4 * int64(sh.Queries) * int64(sh.Heads*sh.HeadDim)
	cache := 2 * int64(sh.Context) * int64(sh.KVHeads*sh.HeadDim)
	for _, c := range []struct {
		what string
		b    vk.Binding
		n    int64
	}{{"q", io.Q, qBytes}, {"k", io.K, cache}, {"v", io.V, cache}, {"out", io.Out, qBytes}, {"step", io.Step, 4}} {
		if err := need(c.what, c.b, c.n); err != nil {
			return err
		}
	}
	if sh.Mask {
		if err := need("mask", io.Mask, (2*int64(sh.Queries)*int64(sh.Context)+3)&^3); err != nil {
			return err
		}
	} else {
		io.Mask = io.Q // declared, never read
	}
	pipe, err := f.pipeline(coopSpec(p))
	if err != nil {
		return err
	}
	if p.Splits == 1 {
		s.Dispatch(pipe, []vk.Binding{io.Q, io.K, io.V, io.Mask, io.Step, io.Out, io.Out},
			sh.push(), uint32(gx), uint32(gy), uint32(gz))
		return nil
	}
	oBytes, mlBytes := scratchLayout(p.Splits, sh)
	if err := need("scratch", io.Scratch, oBytes+mlBytes); err != nil {
		return err
	}
	reduce, err := f.pipeline(reduceSpec(sh.HeadDim, false))
	if err != nil {
		return err
	}
	part := vk.Binding{Buf: io.Scratch.Buf, Off: io.Scratch.Off, Size: oBytes}
	ml := vk.Binding{Buf: io.Scratch.Buf, Off: io.Scratch.Off + oBytes, Size: mlBytes}
	s.Dispatch(pipe, []vk.Binding{io.Q, io.K, io.V, io.Mask, io.Step, part, ml},
		sh.push(), uint32(gx), uint32(gy), uint32(gz))
	s.Barrier()
	s.Dispatch(reduce, []vk.Binding{part, ml, io.Out, io.Out},
		vk.Push(uint32(sh.Queries), uint32(sh.Heads), uint32(p.Splits)),
		uint32(sh.Heads), uint32(sh.Queries), 1)
	return nil
}
