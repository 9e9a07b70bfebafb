package kernels

import (
	"fmt"
	"math"

	"github.com/vkinfer/vkinfer/vk"
)

// HeadRope is what a layer with head norms (Qwen3, Gemma 3) does between
// its q, k and v products and attention, as one dispatch: the RMS norm of
// every head of Q and K with their own weights, the rotation of Q in place
// and of K on its way into the cache, and the store of V. Separately these
// are five dispatches (HeadNorm twice, Rope, StoreKV twice) in two
// dependent steps.
type HeadRope struct {
	Q, K, V      vk.Binding // f32 [N][Heads·HeadDim], [N][KVHeads·HeadDim] twice; Q is rewritten
	QNorm, KNorm vk.Binding // Rope.HeadDim f32 values each
	// KCache and VCache are the layer's f16 rings of Slots rows per
	// sequence, Seqs sequences (0 means 1), as StoreKV writes them.
	KCache, VCache vk.Binding
	// Step holds the position of row 0 and its sequence (uint32 each), or
	// with Rows a (position, sequence) pair per row (AppendRowTable).
	Step        vk.Binding
	N, Heads    int
	KVHeads     int
	Rope        RoPE // Rope.HeadDim is the head dim
	Eps         float32
	Slots, Seqs int
	Rows        bool
}

// HeadRope records h.
func (k *Kernels) HeadRope(s *vk.Sequence, h HeadRope) error {
	seqs := max(h.Seqs, 1)
	if err := positive("head_rope", h.N, h.Heads+2*h.KVHeads, h.Rope.HeadDim); err != nil {
		return err
	}
	if err := positive("head_rope", h.Heads, h.KVHeads, h.Slots, seqs); err != nil {
		return err
	}
	ff, err := h.Rope.check(k, "head_rope")
	if err != nil {
		return err
	}
	if h.Rope.HeadDim > maxHeadRopeDim {
		return fmt.Errorf("kernels: head_rope: heads of %d values, at most %d", h.Rope.HeadDim, maxHeadRopeDim)
	}
	if lim := k.info.MaxWorkgroupCount; h.N > int(lim[1]) || h.Heads+2*h.KVHeads > int(lim[0]) {
		return fmt.Errorf("kernels: head_rope: %d rows of %d heads exceed the device's grid %v", h.N, h.Heads+2*h.KVHeads, lim)
	}
	kvDim := h.KVHeads * h.Rope.HeadDim
	for _, c := range []struct {
		what string
		b    vk.Binding
		n    int64
	}{
		{"q", h.Q, f32(h.N * h.Heads * h.Rope.HeadDim)},
		{"k", h.K, f32(h.N * kvDim)},
		{"v", h.V, f32(h.N * kvDim)},
		{"q norm", h.QNorm, f32(h.Rope.HeadDim)},
		{"k norm", h.KNorm, f32(h.Rope.HeadDim)},
		{"k cache", h.KCache, 2 * int64(seqs) * int64(h.Slots) * int64(kvDim)},
		{"v cache", h.VCache, 2 * int64(seqs) * int64(h.Slots) * int64(kvDim)},
		{"step", h.Step, stepBytes(h.N, h.Rows)},
	} {
		if err := need("head_rope "+c.what, c.b, c.n); err != nil {
			return err
		}
	}
	p, err := k.pipeline(k.HeadRopeSpec(h))
	if err != nil {
		return err
	}
	s.Dispatch(p, []vk.Binding{h.Q, h.K, h.V, h.QNorm, h.KNorm, h.KCache, h.VCache, h.Step, ff},
		vk.Push(uint32(h.N), uint32(h.Heads), uint32(h.KVHeads), uint32(h.Slots), uint32(h.Rope.Dims),
			float32(math.Log2(float64(h.Rope.Base))), h.Rope.Scale, h.Eps),
		uint32(h.Heads+2*h.KVHeads), uint32(h.N), 1)
	return nil
}

// maxHeadRopeDim bounds the head a workgroup stages in shared memory.
const maxHeadRopeDim = 1024

// HeadRopeSpec is the pipeline HeadRope builds for h: its head dim, layout,
// frequency factors and row table.
func (k *Kernels) HeadRopeSpec(h HeadRope) vk.PipelineSpec {
	return spec("head_rope", 9, 32, 0, Lanes, k.subgroups(Lanes), uint32(h.Rope.HeadDim), b32(h.Rope.NeoX),
		b32(h.Rope.Factors != nil), b32(h.Rows))
}
