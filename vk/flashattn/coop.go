package flashattn

import (
	"fmt"
	"slices"

	"github.com/vkinfer/vkinfer/coopmat"
	"github.com/vkinfer/vkinfer/shaders"
	"github.com/vkinfer/vkinfer/vk"
)

// CoopPlan is the geometry of the cooperative-matrix prefill kernel
// (shaders/glsl/flash_attn_coopmat.glsl): S = Q·Kᵀ and O += P·V on the
// matrix units in fragments of Shape, the online softmax in f32 by lanes
// that own query rows.
type CoopPlan struct {
	// Emulated runs flash_attn_coopmat_emu, the kernel built against
	// coopmat.glsl's software emulation of the fragment operations: virtual
	// subgroups of Subgroup invocations, whatever the hardware's.
	Emulated bool
	Shape    coopmat.Shape // fragment M x N x K
	// Subgroup is the invocations per subgroup: the hardware subgroup size
	// the pipeline requires, or the emulation's virtual one.
	Subgroup  int
	Subgroups int // per workgroup
	HeadDim   int
	Br        int // query positions per workgroup, a multiple of Shape.M
	Heads     int // q-heads per workgroup, sharing one KV head
	Bc        int // keys per tile
	Mask      bool
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

// Workgroups is the dispatch grid for a shape: query blocks × head groups.
func (p CoopPlan) Workgroups(sh Shape) (x, y, z int) {
	return (sh.Queries + p.Br - 1) / p.Br, sh.KVHeads * (sh.Heads / sh.KVHeads / p.Heads), 1
}

func (p CoopPlan) String() string {
	e := ""
	if p.Emulated {
		e = " emulated"
	}
	return fmt.Sprintf("coopmat%s %dx%dx%d: d=%d br=%d heads=%d bc=%d %d subgroups of %d, %d B shared",
		e, p.Shape.M, p.Shape.N, p.Shape.K, p.HeadDim, p.Br, p.Heads, p.Bc, p.Subgroups, p.Subgroup, p.SharedBytes)
}

// coopShared is the shared memory of flash_attn_coopmat.glsl's arrays
// for a geometry (keep in step with the shader's declarations).
func coopShared(d, br, heads, bc, lanes, fragM int, mask bool) int {
	rows := br * heads
	kvr := bc
	if coopQReg(d) {
		// Q passes through the K/V tile in rounds of whole row blocks
		// (QRR), at least one block.
		kvr = max(bc, min(rows, fragM*max(1, bc/fragM)))
	}
	n := kvr*(d+8)*2 + rows*(bc+8)*2 // shKV, shP (f16)
	if coopQReg(d) {
		n += 16 // shQ's placeholder
	} else {
		n += rows * (d + 8) * 2
	}
	n += rows * (bc + 4) * 4 // shS
	if mask {
		n += (br*(bc+1) + 3) / 4 * 16 // mtile, whole 16-byte units
	} else {
		n += 16
	}
	return n + lanes*4 + rows*4 + 2*16 // redm, shA4, mlive4, moved4
}

// coopQReg says whether the kernel keeps Q's fragments in registers
// (QREG in flash_attn_coopmat.glsl): for head dims up to 128; wider ones
// would spill on RDNA3.
func coopQReg(headDim int) bool { return headDim <= 128 }

// CoopRelErr bounds attention.RelErr for the cooperative-matrix kernel: Q
// and P are rounded to f16 for the products (the scalar kernel's bound is
// 1e-3; scores climbing to ±30 measured 2.3e-3).
const CoopRelErr = 4e-3

// CoopMinQueries is the least batch the cooperative-matrix kernel runs:
// below it the scalar kernel's narrower tiles waste less.
const CoopMinQueries = 16

// CoopTile is a workgroup's q-heads (of one GQA group, sharing its K/V
// tiles) and keys per tile.
type CoopTile struct{ Heads, Bc int }

func (t CoopTile) String() string { return fmt.Sprintf("%dx%d", t.Heads, t.Bc) }

// CoopTiles lists the tiles CoopPlan tries, in its order.
func CoopTiles() []CoopTile { return slices.Clone(coopTiles) }

// preferred lists the tiles to try before the order: t itself where it
// names both, else the order's tiles of its q-heads or of its keys
// (none for the zero tile).
func (t CoopTile) preferred() []CoopTile {
	switch {
	case t == CoopTile{}:
		return nil
	case t.Heads > 0 && t.Bc > 0:
		return []CoopTile{t}
	}
	var out []CoopTile
	for _, c := range coopTiles {
		if (t.Heads == 0 || c.Heads == t.Heads) && (t.Bc == 0 || c.Bc == t.Bc) {
			out = append(out, c)
		}
	}
	return out
}

// coopTiles are the geometries tried, in order: the first that the GQA
// group, the head dim and the device's shared memory allow. Measured on the
// H200 (Llama-3-8B's and Qwen3-30B-A3B's attention, 512 queries at depth
// 16384, docs/KERNELS.md), with 8 scores a lane: 8 heads x 32 keys (GQA
// groups of 8) 140 TFLOP/s, 4 x 64 138, 4 x 32 120, 2 x 32 102, 2 x 64 97,
// 1 x 32 67, 1 x 64 55. More q-heads share each K/V tile; the registers a
// lane holds (the next tile's K and V, its scores and output fragments)
// set how many warps a compute unit keeps.
var coopTiles = []CoopTile{{8, 32}, {4, 64}, {4, 32}, {2, 32}, {2, 64}, {1, 32}, {1, 64}, {1, 16}}

// CoopPlan is the cooperative-matrix kernel's geometry for sh, or an error
// saying why Record runs the scalar kernel instead: the kernel is off
// (Options.Coop and CoopEmulated), the batch is shorter than
// CoopMinQueries, the head dim is not a multiple of the fragment shape,
// or no tile fits the device's shared memory. Options.CoopTile's tiles
// are tried first, then the order's.
func (f *FlashAttn) CoopPlan(sh Shape) (CoopPlan, error) {
	p := CoopPlan{Emulated: f.coopEmu, HeadDim: sh.HeadDim, Mask: sh.Mask, Heads: 1}
	switch {
	case f.coopEmu:
		p.Shape, p.Subgroup = coopmat.Shape{M: 16, N: 16, K: 16}, coopEmuSubgroup
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
	p.Br = s.M * ((CoopMinQueries + s.M - 1) / s.M)
	group := sh.Heads / sh.KVHeads
	tiles := f.coopTile.preferred()
	for _, t := range coopTiles {
		if !slices.Contains(tiles, t) {
			tiles = append(tiles, t)
		}
	}
	for _, t := range tiles {
		if t.Heads < 1 || t.Bc < 1 || t.Bc%s.N != 0 || t.Bc%s.K != 0 || group%t.Heads != 0 {
			continue
		}
		q := p
		q.Heads, q.Bc = t.Heads, t.Bc
		// On the matrix units a lane takes 8 scores of its row (at least
		// four subgroups), or more lanes until every row has whole lanes
		// and the subgroups split evenly over the row blocks (each keeps
		// one block's Q fragments). A small share of the scores and of
		// the output fragments keeps the registers down: 4 q-heads x 64
		// keys held 127 registers a lane on 16 subgroups (H200), 194 on
		// 8 and 255, spilling, on 4. The emulation keeps 4 subgroups: its
		// lanes each hold whole fragments.
		q.Subgroups = 4
		if !f.coopEmu {
			q.Subgroups = max(4, q.Rows()*t.Bc/8/q.Subgroup)
		}
		for q.Lanes() < q.Rows() || q.Lanes()%q.Rows() != 0 || q.Subgroups%(q.Rows()/s.M) != 0 {
			q.Subgroups *= 2
		}
		if q.Lanes() > f.info.MaxWorkgroupInvocations {
			continue
		}
		// With Q in registers a subgroup keeps at most 4 output fragments:
		// 8 q-heads x 32 keys at wave64 (8 subgroups, 8 fragments each)
		// spilled on navi31, at wave32 (16 subgroups, 4 each) it did not.
		if !f.coopEmu && coopQReg(sh.HeadDim) && q.Rows()/s.M*(sh.HeadDim/s.N) > 4*q.Subgroups {
			continue
		}
		q.SharedBytes = coopShared(sh.HeadDim, q.Br, t.Heads, t.Bc, q.Lanes(), s.M, sh.Mask)
		if q.SharedBytes <= f.info.SharedMemory {
			return q, nil
		}
	}
	return p, fmt.Errorf("flashattn: no tile of %v (q-heads, keys) fits the device's %d bytes of shared memory and %d invocations at head dim %d", tiles, f.info.SharedMemory, f.info.MaxWorkgroupInvocations, sh.HeadDim)
}

// coopRuns returns the plan Record runs on the matrix units for sh, and
// whether it does: where CoopPlan takes sh and no 8-bit output is asked
// for (q8), which only the scalar kernels write.
func (f *FlashAttn) coopRuns(sh Shape, q8 bool) (CoopPlan, bool) {
	p, err := f.CoopPlan(sh)
	return p, err == nil && !q8
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
			uint32(p.Bc), 1, 8, b32(p.Mask), 0, 0, uint32(p.Shape.M), uint32(p.Shape.N), uint32(p.Shape.K)}}
}

// recordCoop records the cooperative-matrix kernel: one dispatch.
func (f *FlashAttn) recordCoop(s *vk.Sequence, io IO, sh Shape, p CoopPlan) error {
	gx, gy, gz := p.Workgroups(sh)
	if lim := f.info.MaxWorkgroupCount; gx > int(lim[0]) || gy > int(lim[1]) {
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
	s.Dispatch(pipe, []vk.Binding{io.Q, io.K, io.V, io.Mask, io.Step, io.Out, io.Out},
		sh.push(), uint32(gx), uint32(gy), uint32(gz))
	return nil
}
