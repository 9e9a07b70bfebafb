package kernels

import (
	"fmt"

	"github.com/vkinfer/vkinfer/quant"
	"github.com/vkinfer/vkinfer/vk"
)

// FoldNorm is the RMS norm that MatVecAddNorm folds into the product
// before it: Out = x / sqrt(mean(x²) + Eps) * W for the product's result x.
type FoldNorm struct {
	W   vk.Binding  // the norm's weights: f32, one per row of the product
	Out vk.Binding  // the normalised row (may be the product's dst)
	Q8  *vk.Binding // and its 8-bit copy (QuantizeQ8's layout), or nil
	Eps float32
}

// MatVecAddNorm records dst = r + W·x for one column (decode), then the
// RMS norm of the whole of dst into nm.Out (and nm.Q8): matvec_norm (x in
// f32) or, with q8, matvec_norm_q8 (x in the q8 layout, weights where
// HasQ8 holds), in shape sh. The last of the dispatch's workgroups to
// finish its rows does the norm (matvec_norm.glsl); their counter comes
// zeroed from the kernels' block, a fresh one per recording, and the
// kernel leaves it at zero, so a recording may be replayed.
func (k *Kernels) MatVecAddNorm(s *vk.Sequence, dst, w, x, r vk.Binding, q8 bool, t quant.Type, rows, K int, sh MatVecShape, nm FoldNorm) error {
	name, xSize := "matvec_norm", f32(K)
	if q8 {
		name, xSize = "matvec_norm_q8", Q8Bytes(1, K)
		if !HasQ8(t) {
			return fmt.Errorf("kernels: %s: weights of type %s: %w", name, t, quant.ErrUnsupported)
		}
		if !k.info.IntegerDot {
			return fmt.Errorf("kernels: %s: the device lacks the integer dot product feature", name)
		}
		if err := vec4Aligned(name, x); err != nil {
			return err
		}
	}
	rb, err := checkMatrix(name, dst, w, x, xSize, t, 1, rows, K)
	if err != nil {
		return err
	}
	if sh.Lanes < 1 || sh.Rows < 1 || sh.Unroll < 1 || sh.Lanes > k.info.MaxWorkgroupInvocations {
		return fmt.Errorf("kernels: %s: shape %+v", name, sh)
	}
	if w.Off%16 != 0 {
		return fmt.Errorf("kernels: %s: weights at offset %d: need a multiple of 16", name, w.Off)
	}
	if err := need(name+" residual", r, f32(rows)); err != nil {
		return err
	}
	if err := need(name+" norm weights", nm.W, f32(rows)); err != nil {
		return err
	}
	if err := need(name+" norm out", nm.Out, f32(rows)); err != nil {
		return err
	}
	q8b, err := orUnused(nm.Q8, k.unused)
	if err != nil {
		return err
	}
	if nm.Q8 != nil {
		// Rounded a 32-value block at a time, read and written as vec4s.
		if rows%32 != 0 {
			return fmt.Errorf("kernels: %s: rows of %d values: the q8 copy needs a multiple of 32", name, rows)
		}
		if err := vec4Aligned(name, nm.W, nm.Out, *nm.Q8); err != nil {
			return err
		}
		if err := need(name+" q8", *nm.Q8, Q8Bytes(1, rows)); err != nil {
			return err
		}
	}
	counter, err := k.counters(1)
	if err != nil {
		return err
	}
	p, err := k.pipeline(k.MatVecNormSpec(t, sh, q8, nm.Q8 != nil))
	if err != nil {
		return err
	}
	groups := ceil(rows, sh.Rows)
	gx, gy := k.grid(groups)
	s.Label(fmt.Sprintf("%dx%d %s", rows, K, t))
	s.Dispatch(p, []vk.Binding{dst, w, x, r, nm.W, nm.Out, q8b, counter},
		vk.Push(uint32(rows), uint32(K), uint32(rb), uint32(groups), nm.Eps), gx, gy, 1)
	return nil
}

// MatVecNormSpec is the pipeline MatVecAddNorm builds for weights of type
// t in shape sh, on 8-bit activations with q8, writing the norm's 8-bit
// copy with q8Out.
func (k *Kernels) MatVecNormSpec(t quant.Type, sh MatVecShape, q8, q8Out bool) vk.PipelineSpec {
	name := "matvec_norm"
	if q8 {
		name = "matvec_norm_q8"
	}
	return spec(name, 8, 20, sh.Wave,
		uint32(sh.Lanes), uint32(t), 1, uint32(sh.Rows), k.subgroups(sh.Lanes), uint32(sh.Unroll), 1, b32(q8Out))
}
