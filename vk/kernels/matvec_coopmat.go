package kernels

import (
	"fmt"

	"github.com/vkinfer/vkinfer/quant"
	"github.com/vkinfer/vkinfer/vk"
)

// MatVecCoopShape is the geometry of the narrow batches' cooperative-matrix
// product (matvec_coopmat.glsl): a workgroup holds Subgroups subgroups,
// Split of them to a block of FM fragments of weight rows (each taking
// every Split-th step of K), and computes FN fragments of activation
// columns; K advances BK values a step.
type MatVecCoopShape struct {
	Subgroups, Split, FM, FN, BK int
}

func (s MatVecCoopShape) String() string {
	return fmt.Sprintf("g%ds%dm%dn%dk%d", s.Subgroups, s.Split, s.FM, s.FN, s.BK)
}

// matVecCoopFrags is the most fragments along N a workgroup of the
// built-in shape computes: 64 columns of 16-wide fragments, four
// accumulators a subgroup (more, in the emulation, some drivers refuse to
// build; see pickCoopTile).
const matVecCoopFrags = 4

// matVecCoopSplitMax bounds Split (and so the workgroup's subgroups).
const matVecCoopSplitMax = 8

// matVecCoopPerCU is how many subgroups per compute unit MatVecCoopFor's
// split aims for: on the H200 the 4096-row matrices ran faster in 4 parts
// than in the 8 that twice as many asked for (docs/KERNELS.md).
const matVecCoopPerCU = 4

// UseMatVecCoop says whether the engine's product of n activation columns
// of K values with weights of type t runs on matvec_coopmat: with the
// policy NarrowCoop on, for MaxMatVecCols < n <= NarrowCoopCols, on rows
// of whole steps.
func (k *Kernels) UseMatVecCoop(t quant.Type, n, K int) bool {
	return k.narrowCoop(n) && HasCoop(t) && K%k.matVecCoopUnit(t) == 0
}

// narrowCoop says whether the policy sends products of n columns to
// matvec_coopmat (for the weight types and row lengths it takes).
func (k *Kernels) narrowCoop(n int) bool {
	return k.NarrowCoop && k.coopOn() && n > MaxMatVecCols && n <= NarrowCoopCols
}

// matVecCoopUnit is the least step for weights of type t: whole runs of
// dequant.glsl's pieces and whole fragments along K.
func (k *Kernels) matVecCoopUnit(t quant.Type) int {
	_, _, kk := k.coopShape()
	u := kSpan(t)
	for u%kk != 0 || u%8 != 0 {
		u += kSpan(t)
	}
	return u
}

// MatVecCoopFor is the built-in shape for a rows x K matrix of type t and
// n columns: 16-row blocks (one fragment: the most blocks to spread the
// stream over; 32-row blocks in 64-value steps past 32 columns, where the
// weights' type allows, on 32-wide subgroups of the matrix units),
// 128-value steps where K allows (64 in the emulation, whose lanes hold
// four times the pieces), all columns in one workgroup row up to
// matVecCoopFrags fragments, and Split doubled until the matrix has
// matVecCoopPerCU subgroups per compute unit or K runs out of steps: the
// k and v projections' 1024 rows are 64 blocks, an eighth of what an H200
// holds at that count.
func (k *Kernels) MatVecCoopFor(t quant.Type, n, rows, K int) MatVecCoopShape {
	m, cn, _ := k.coopShape()
	unit := k.matVecCoopUnit(t)
	bk := unit
	for _, c := range []int{128, 64} {
		if k.CoopEmulated && c > 64 {
			continue
		}
		if c%unit == 0 && K%c == 0 {
			bk = c
			break
		}
	}
	frags := ceil(n, cn)
	fn := ceil(frags, ceil(frags, matVecCoopFrags))
	// Past two fragments of columns, 32-row blocks: each B fragment then
	// serves two A fragments, and at 64 columns the activations' reads, not
	// the weights', are the cost (docs/KERNELS.md). Their stage of 32 rows
	// takes 64-value steps. On 32-wide subgroups only: RDNA3's wave64 build
	// spills 40 VGPRs (ACO, navi31), and NVIDIA's driver fails to build
	// the emulation's.
	fm := 1
	if fn > 2 && K%64 == 0 && 64%unit == 0 && !k.CoopEmulated && k.coopSubgroup() == 32 {
		fm, bk = 2, 64
	}
	cus := k.info.ComputeUnits
	if cus == 0 {
		cus = 32
	}
	blocks, steps := ceil(rows, m*fm), K/max(bk, 1)
	split := 1
	for split < matVecCoopSplitMax && blocks*split < matVecCoopPerCU*cus && 2*split <= steps {
		split *= 2
	}
	sh := MatVecCoopShape{Subgroups: max(4, split), Split: split, FM: fm, FN: fn, BK: bk}
	// Fewer subgroups a workgroup (and a smaller split) where the device
	// limits them.
	for sh.Subgroups > 1 && k.checkMatVecCoop(sh, t) != nil {
		sh.Subgroups /= 2
		sh.Split = min(sh.Split, sh.Subgroups)
	}
	return sh
}

// MatVecCoopCols is the columns that MatVecCoop with shape sh reads for n
// activation columns: whole workgroups of FN fragments. Those past n are
// read, never written.
func (k *Kernels) MatVecCoopCols(sh MatVecCoopShape, n int) int {
	_, cn, _ := k.coopShape()
	w := max(sh.FN, 1) * cn
	return ceil(n, w) * w
}

// MatVecCoopXBytes is the size of the f16 activations that MatVecCoop
// with shape sh reads for n columns of K values: QuantizeF16Blocked's
// layout of MatVecCoopCols columns.
func (k *Kernels) MatVecCoopXBytes(sh MatVecCoopShape, n, K int) int64 {
	return F16BlockedBytes(k.MatVecCoopCols(sh, n), K)
}

// CoopXBytes is the size of the f16 copy of n columns of K values that the
// engine's cooperative-matrix product of them (CoopProduct) reads, for
// every weight type.
func (k *Kernels) CoopXBytes(n, K int) int64 {
	if b := k.CoopXBlocked(n, K); b != 0 {
		return F16BlockedBytes(b, K)
	}
	return F16Bytes(n, K)
}

// CoopXBlocked is the rows of the blocked layout (QuantizeF16Blocked) in
// which the engine's cooperative-matrix products of n columns of K values
// read their f16 copy, or 0 where they read it row after row
// (QuantizeF16).
func (k *Kernels) CoopXBlocked(n, K int) int {
	if !k.narrowCoop(n) {
		return 0
	}
	return k.MatVecCoopCols(k.MatVecCoopFor(quant.Q4_K, n, 1, K), n)
}

// MatVecCoop records dst = W·x on the matrix units for n columns of
// activations xh in QuantizeF16's layout, padded to MatVecCoopXBytes, with
// the built-in shape (MatVecCoopFor).
func (k *Kernels) MatVecCoop(s *vk.Sequence, dst, w, xh vk.Binding, t quant.Type, n, rows, K int) error {
	return k.MatVecCoopWith(s, dst, w, xh, t, n, rows, K, k.MatVecCoopFor(t, n, rows, K))
}

// MatVecCoopWith is MatVecCoop with an explicit shape.
func (k *Kernels) MatVecCoopWith(s *vk.Sequence, dst, w, xh vk.Binding, t quant.Type, n, rows, K int, sh MatVecCoopShape) error {
	return k.matVecCoop(s, dst, w, xh, nil, t, n, rows, K, sh)
}

// MatVecCoopAdd records dst = r + W·x as MatVecCoop does, the residual r
// added as the kernel writes; dst may be r.
func (k *Kernels) MatVecCoopAdd(s *vk.Sequence, dst, w, xh, r vk.Binding, t quant.Type, n, rows, K int) error {
	return k.matVecCoop(s, dst, w, xh, &r, t, n, rows, K, k.MatVecCoopFor(t, n, rows, K))
}

func (k *Kernels) matVecCoop(s *vk.Sequence, dst, w, xh vk.Binding, r *vk.Binding, t quant.Type, n, rows, K int, sh MatVecCoopShape) error {
	if err := k.coopReady("matvec_coopmat", t); err != nil {
		return err
	}
	if err := k.checkMatVecCoop(sh, t); err != nil {
		return err
	}
	if K%sh.BK != 0 {
		return fmt.Errorf("kernels: matvec_coopmat: rows of %d values: need a multiple of the step, %d", K, sh.BK)
	}
	rb, err := checkMatrix("matvec_coopmat", dst, w, xh, k.MatVecCoopXBytes(sh, n, K), t, n, rows, K)
	if err != nil {
		return err
	}
	if err := coopAligned("matvec_coopmat", t, w, xh); err != nil {
		return err
	}
	var res vk.Binding
	if r != nil {
		if err := need("matvec_coopmat residual", *r, f32(n*rows)); err != nil {
			return err
		}
		res = *r
	} else if res, err = k.unusedInput(); err != nil {
		return err
	}
	m, cn, _ := k.coopShape()
	gx, gy := ceil(rows, (sh.Subgroups/sh.Split)*sh.FM*m), ceil(n, sh.FN*cn)
	if gx > int(k.info.MaxWorkgroupCount[0]) || gy > int(k.info.MaxWorkgroupCount[1]) {
		return fmt.Errorf("kernels: matvec_coopmat: %dx%d workgroups exceed the device's grid", gx, gy)
	}
	p, err := k.pipeline(k.MatVecCoopSpec(t, sh, r != nil))
	if err != nil {
		return err
	}
	s.Label(fmt.Sprintf("%dx%d %s", rows, K, t))
	s.Dispatch(p, []vk.Binding{dst, w, xh, res}, vk.Push(uint32(rows), uint32(n), uint32(K), uint32(rb)), uint32(gx), uint32(gy), 1)
	return nil
}

// checkMatVecCoop reports whether shape sh can run on this device with
// weights of type t and the fragment shape in use.
func (k *Kernels) checkMatVecCoop(sh MatVecCoopShape, t quant.Type) error {
	m, n, kk := k.coopShape()
	bad := func(why string) error { return fmt.Errorf("kernels: matvec_coopmat: shape %v: %s", sh, why) }
	switch {
	case sh.Subgroups < 1 || sh.Split < 1 || sh.FM < 1 || sh.FN < 1 || sh.BK < 1:
		return bad("sizes must be positive")
	case sh.Subgroups%sh.Split != 0:
		return bad("the split must divide the subgroups")
	case sh.BK%k.matVecCoopUnit(t) != 0:
		return bad(fmt.Sprintf("the step must hold whole runs of %s pieces and %d-value fragments", t, kk))
	case 16%kk != 0:
		return bad(fmt.Sprintf("fragments of %d values along K straddle the activations' blocks of 16", kk))
	}
	if inv := sh.Subgroups * k.coopSubgroup(); inv > k.info.MaxWorkgroupInvocations {
		return bad(fmt.Sprintf("needs %d invocations, device allows %d", inv, k.info.MaxWorkgroupInvocations))
	}
	// Each subgroup's f16 stage of FM fragments of rows (rows padded by
	// 16 bytes) and one f32 fragment each for the output.
	if b := sh.Subgroups * (sh.FM*m*(2*sh.BK+16) + 4*m*n); b > k.info.SharedMemory {
		return bad(fmt.Sprintf("needs %d bytes of shared memory, device has %d", b, k.info.SharedMemory))
	}
	return nil
}

// MatVecCoopSpec is the pipeline MatVecCoopWith (MatVecCoopAdd with
// residual) builds for weights of type t and shape sh.
func (k *Kernels) MatVecCoopSpec(t quant.Type, sh MatVecCoopShape, residual bool) vk.PipelineSpec {
	m, n, kk := k.coopShape()
	sg := k.coopSubgroup()
	name, wave := "matvec_coopmat", sg
	if k.CoopEmulated {
		name, wave = "matvec_coopmat_emu", 0
	}
	return spec(name, 4, 16, wave, uint32(sh.Subgroups*sg), uint32(t), uint32(sh.Subgroups), uint32(sh.Split),
		uint32(sh.FM), uint32(sh.FN), uint32(sh.BK), uint32(m), uint32(n), uint32(kk), uint32(sg), b32(residual))
}

// CoopProduct records the engine's cooperative-matrix product of n
// columns of f16 activations xh (CoopXBytes of them): matvec_coopmat where
// UseMatVecCoop takes it, else matmul_coopmat with CoopTileForShape's tile.
func (k *Kernels) CoopProduct(s *vk.Sequence, dst, w, xh vk.Binding, t quant.Type, n, rows, K int) error {
	if k.UseMatVecCoop(t, n, K) {
		return k.MatVecCoop(s, dst, w, xh, t, n, rows, K)
	}
	return k.MatMulCoop(s, dst, w, xh, t, n, rows, K, k.CoopTileForShape(t, rows, n))
}

// CoopProductSpec is the pipeline CoopProduct builds, with its kernel's
// name and shape for a plan's listing.
func (k *Kernels) CoopProductSpec(t quant.Type, n, rows, K int) (ps vk.PipelineSpec, kernel, shape string) {
	if k.UseMatVecCoop(t, n, K) {
		sh := k.MatVecCoopFor(t, n, rows, K)
		return k.MatVecCoopSpec(t, sh, false), "matvec_coopmat", sh.String()
	}
	tile := k.CoopTileForShape(t, rows, n)
	return k.MatMulCoopSpec(t, tile), "matmul_coopmat", tile.String()
}
