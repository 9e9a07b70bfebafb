package kernels

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/vkinfer/vkinfer/quant"
	"github.com/vkinfer/vkinfer/vk"
)

// Embed records dst[i] = dequant(table[tokens[i]]) for n tokens (an int32
// buffer) from a vocab x cols table of type t. An id outside the table gives
// a zero row.
func (k *Kernels) Embed(s *vk.Sequence, dst, table, tokens vk.Binding, t quant.Type, n, vocab, cols int) error {
	rb, err := weightRow("embed", t, vocab, cols)
	if err != nil {
		return err
	}
	if err := positive("embed", n, cols); err != nil {
		return err
	}
	if err := need("embed dst", dst, f32(n*cols)); err != nil {
		return err
	}
	if err := need("embed table", table, round4(int64(vocab)*int64(rb))); err != nil {
		return err
	}
	if err := need("embed tokens", tokens, 4*int64(n)); err != nil {
		return err
	}
	if n > int(k.info.MaxWorkgroupCount[1]) {
		return fmt.Errorf("kernels: embed: %d tokens in one dispatch, at most %d", n, k.info.MaxWorkgroupCount[1])
	}
	p, err := k.pipeline(k.EmbedSpec(t))
	if err != nil {
		return err
	}
	pieces := ceil(cols, 16) // dequant.glsl decodes 16 values at a time
	s.Dispatch(p, []vk.Binding{dst, table, tokens}, vk.Push(uint32(cols), uint32(rb), uint32(vocab)),
		uint32(ceil(pieces, Lanes)), uint32(n), 1)
	return nil
}

// EmbedSpec is the pipeline Embed builds for a table of type t.
func (k *Kernels) EmbedSpec(t quant.Type) vk.PipelineSpec {
	return spec("embed", 3, 12, 0, Lanes, uint32(t))
}

// normLanes is the widest RMSNorm workgroup: 1024 is every Vulkan
// device's maximum and leaves 4 values per lane for a 4096-wide row.
const normLanes = 1024

// RMSNorm records dst[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w for rows x
// cols values; dst may be x.
func (k *Kernels) RMSNorm(s *vk.Sequence, dst, x, w vk.Binding, rows, cols int, eps float32) error {
	return k.rmsNorm(s, dst, nil, nil, x, w, rows, cols, eps)
}

// RMSNormAdd records dst[r] = res[r] + x[r] / sqrt(mean(x[r]^2) + eps) * w:
// a post-norm and the residual add after it (Gemma 3) in one dispatch.
// dst may be x or res.
func (k *Kernels) RMSNormAdd(s *vk.Sequence, dst, x, w, res vk.Binding, rows, cols int, eps float32) error {
	if err := need("rms_norm residual", res, f32(rows*cols)); err != nil {
		return err
	}
	return k.rmsNorm(s, dst, nil, &res, x, w, rows, cols, eps)
}

// HeadNorm records the RMS norm of every head of x in place: x holds rows
// of heads*headDim values, and each run of headDim values becomes
// run / sqrt(mean(run^2) + eps) * w, w holding headDim values (the Q and K
// norms of Qwen3 and Gemma 3). It is RMSNorm over the (rows*heads) x
// headDim view of x, one workgroup per head.
func (k *Kernels) HeadNorm(s *vk.Sequence, x, w vk.Binding, rows, heads, headDim int, eps float32) error {
	if err := positive("head_norm", rows, heads, headDim); err != nil {
		return err
	}
	return k.rmsNorm(s, x, nil, nil, x, w, rows*heads, headDim, eps)
}

// RMSNormQ8 is RMSNorm that also writes dst in the q8 layout (as
// QuantizeQ8 would) to q8, for cols a multiple of 32 and bindings at
// multiples of 16 bytes.
func (k *Kernels) RMSNormQ8(s *vk.Sequence, dst, q8, x, w vk.Binding, rows, cols int, eps float32) error {
	if cols%32 != 0 {
		return fmt.Errorf("kernels: rms_norm: rows of %d values: the q8 form needs a multiple of 32", cols)
	}
	if err := vec4Aligned("rms_norm", dst, x, w); err != nil {
		return err
	}
	if err := need("rms_norm q8", q8, Q8Bytes(rows, cols)); err != nil {
		return err
	}
	return k.rmsNorm(s, dst, &q8, nil, x, w, rows, cols, eps)
}

// vec4Aligned checks that bindings a shader reads as vec4s start on 16 bytes.
func vec4Aligned(op string, bs ...vk.Binding) error {
	for _, b := range bs {
		if b.Off%16 != 0 {
			return fmt.Errorf("kernels: %s: binding at offset %d: need a multiple of 16", op, b.Off)
		}
	}
	return nil
}

// rmsNorm records the norm kernel, writing the q8 copy where q8 is not nil
// and adding the residual where res is not nil (not both: nothing needs it).
func (k *Kernels) rmsNorm(s *vk.Sequence, dst vk.Binding, q8, res *vk.Binding, x, w vk.Binding, rows, cols int, eps float32) error {
	if err := positive("rms_norm", rows, cols); err != nil {
		return err
	}
	if err := need("rms_norm dst", dst, f32(rows*cols)); err != nil {
		return err
	}
	if err := need("rms_norm x", x, f32(rows*cols)); err != nil {
		return err
	}
	if err := need("rms_norm weight", w, f32(cols)); err != nil {
		return err
	}
	if q8 != nil && res != nil {
		return fmt.Errorf("kernels: rms_norm: a residual and a q8 copy in one dispatch")
	}
	q8b, err := orUnused(q8, k.unused)
	if err != nil {
		return err
	}
	resb, err := orUnused(res, k.unusedInput)
	if err != nil {
		return err
	}
	p, err := k.pipeline(k.rmsNormSpec(cols, q8 != nil, res != nil))
	if err != nil {
		return err
	}
	gx, gy := k.grid(rows)
	s.Dispatch(p, []vk.Binding{dst, x, w, q8b, resb}, vk.Push(uint32(rows), uint32(cols), eps), gx, gy, 1)
	return nil
}

// orUnused is *b, or the placeholder a shader's optional buffer gets
// where b is nil.
func orUnused(b *vk.Binding, placeholder func() (vk.Binding, error)) (vk.Binding, error) {
	if b != nil {
		return *b, nil
	}
	return placeholder()
}

// RMSNormSpec is the pipeline RMSNorm (RMSNormQ8 with q8) builds for rows
// of cols values.
func (k *Kernels) RMSNormSpec(cols int, q8 bool) vk.PipelineSpec {
	return k.rmsNormSpec(cols, q8, false)
}

// RMSNormAddSpec is the pipeline RMSNormAdd builds for rows of cols values.
func (k *Kernels) RMSNormAddSpec(cols int) vk.PipelineSpec {
	return k.rmsNormSpec(cols, false, true)
}

func (k *Kernels) rmsNormSpec(cols int, q8, add bool) vk.PipelineSpec {
	// One workgroup normalises a row, so in decode (one row) a single
	// workgroup does all the work: it must be wide, or each lane walks the
	// row with one dependent load after another. 64 lanes took 34 µs for a
	// 4096-wide row on an H100; with up to 1024 lanes each loads a handful
	// of values. Narrow rows keep small workgroups.
	lanes := min(k.info.MaxWorkgroupInvocations, normLanes, max(Lanes, ceil(cols, 4*Lanes)*Lanes))
	withQ8, blocks := uint32(0), uint32(0)
	if q8 {
		withQ8 = 1
		// A lane per block of 32 where the row has few enough blocks, in a
		// whole number of 64-lane groups: a workgroup that ends in a
		// partial subgroup lost that subgroup's sum on lavapipe.
		if l := ceil(cols/32, Lanes) * Lanes; l <= min(k.info.MaxWorkgroupInvocations, normLanes) {
			lanes, blocks = l, 1
		}
	}
	withAdd := uint32(0)
	if add {
		withAdd = 1
	}
	return spec("rms_norm", 5, 12, 0, uint32(lanes), k.subgroups(lanes), withQ8, blocks, withAdd)
}

// RoPE describes a rotary position embedding.
type RoPE struct {
	HeadDim int     // values per head
	Dims    int     // leading values of each head that rotate (even, <= HeadDim)
	Base    float32 // frequency base (rope_freq_base, theta)
	Scale   float32 // frequency scale (1 / linear context scaling factor)
	NeoX    bool    // rotate (i, i+Dims/2) pairs instead of (2i, 2i+1)
	// Factors, when not nil, holds Dims/2 f32 divisors of the frequencies
	// (the rope_freqs tensor of Llama 3.1 and others).
	Factors *vk.Binding
}

// check validates the rotation and returns its factors binding (an unused
// one without factors).
func (r RoPE) check(k *Kernels, op string) (vk.Binding, error) {
	if r.HeadDim%2 != 0 || r.Dims%2 != 0 || r.Dims < 2 || r.Dims > r.HeadDim {
		return vk.Binding{}, fmt.Errorf("kernels: %s: %d rotated of %d values per head (both even, 2 <= rotated <= head)", op, r.Dims, r.HeadDim)
	}
	if !(r.Base > 0) || !(r.Scale > 0) {
		return vk.Binding{}, fmt.Errorf("kernels: %s: base %g, scale %g", op, r.Base, r.Scale)
	}
	if r.Factors == nil {
		return k.unusedInput()
	}
	if err := need(op+" factors", *r.Factors, f32(r.Dims/2)); err != nil {
		return vk.Binding{}, err
	}
	return *r.Factors, nil
}

// Rope records the rotation of x [n][heads][HeadDim] into dst (which may be
// x); row i is at position pos + i with pos read from step.
func (k *Kernels) Rope(s *vk.Sequence, dst, x, step vk.Binding, n, heads int, r RoPE) error {
	return k.rope(s, dst, x, step, n, heads, r, false)
}

// RopeRows is Rope for rows that are one token each of several sequences:
// rows holds n (position, sequence) pairs of uint32 and row i is at
// position rows[i].position (AppendRowTable writes the table).
func (k *Kernels) RopeRows(s *vk.Sequence, dst, x, rows vk.Binding, n, heads int, r RoPE) error {
	return k.rope(s, dst, x, rows, n, heads, r, true)
}

func (k *Kernels) rope(s *vk.Sequence, dst, x, step vk.Binding, n, heads int, r RoPE, rows bool) error {
	if err := positive("rope", n, heads, r.HeadDim); err != nil {
		return err
	}
	ff, err := r.check(k, "rope")
	if err != nil {
		return err
	}
	size := f32(n * heads * r.HeadDim)
	if err := need("rope dst", dst, size); err != nil {
		return err
	}
	if err := need("rope x", x, size); err != nil {
		return err
	}
	stepSize := int64(4) // the position; rope reads no sequence
	if rows {
		stepSize = stepBytes(n, rows)
	}
	if err := need("rope step", step, stepSize); err != nil {
		return err
	}
	p, err := k.pipeline(k.ropeSpec(r, rows))
	if err != nil {
		return err
	}
	pairs := n * heads * r.HeadDim / 2
	gx, gy := k.grid(ceil(pairs, Lanes))
	s.Dispatch(p, []vk.Binding{dst, x, step, ff},
		vk.Push(uint32(pairs), uint32(r.HeadDim), uint32(r.Dims), uint32(heads),
			float32(math.Log2(float64(r.Base))), r.Scale),
		gx, gy, 1)
	return nil
}

// RopeSpec is the pipeline Rope builds for r.
func (k *Kernels) RopeSpec(r RoPE) vk.PipelineSpec { return k.ropeSpec(r, false) }

// RopeRowsSpec is the pipeline RopeRows builds for r.
func (k *Kernels) RopeRowsSpec(r RoPE) vk.PipelineSpec { return k.ropeSpec(r, true) }

func (k *Kernels) ropeSpec(r RoPE, rows bool) vk.PipelineSpec {
	return spec("rope", 4, 24, 0, Lanes, b32(r.NeoX), b32(r.Factors != nil), b32(rows))
}

// AppendRowTable appends to b the row table of the …Rows kernels: for row
// i, uint32 pos[i] then uint32 seqs[i], little-endian. Its first pair is
// the step the other kernels read (the first position, then the
// sequence), so one buffer serves both. A program passes the table it
// wrote last, emptied, so that a token's run allocates nothing. It panics
// unless the two are as long.
func AppendRowTable(b []byte, seqs, pos []int32) []byte {
	if len(seqs) != len(pos) {
		panic(fmt.Sprintf("kernels: row table of %d sequences and %d positions", len(seqs), len(pos)))
	}
	for i := range seqs {
		b = binary.LittleEndian.AppendUint32(b, uint32(pos[i]))
		b = binary.LittleEndian.AppendUint32(b, uint32(seqs[i]))
	}
	return b
}

// stepBytes is the size of the step binding a kernel over n rows reads:
// the first position and the sequence, or with rows a (position, sequence)
// pair per row.
func stepBytes(n int, rows bool) int64 {
	if rows {
		return 8 * int64(n)
	}
	return 8
}

// Element-wise operations of eltwise.comp (its OP specialization constant).
const (
	opAdd    = 0
	opSwiGLU = 1
	opCopy   = 2
	opGeGLU  = 3
	opScale  = 4
)

// eltwise records dst = op(a, b) over rows x cols with row strides in
// floats (a b stride of 0 broadcasts b's first row); scale is opScale's
// factor.
func (k *Kernels) eltwise(s *vk.Sequence, name string, op uint32, dst, a, b vk.Binding, rows, cols, ds, as, bs int, scale float32) error {
	if err := positive(name, rows, cols); err != nil {
		return err
	}
	if ds < cols || as < cols || (bs != 0 && bs < cols) {
		return fmt.Errorf("kernels: %s: row strides %d, %d, %d for rows of %d", name, ds, as, bs, cols)
	}
	extent := func(stride int) int64 { return f32((rows-1)*stride + cols) }
	if err := need(name+" dst", dst, extent(ds)); err != nil {
		return err
	}
	if err := need(name+" a", a, extent(as)); err != nil {
		return err
	}
	if op != opCopy && op != opScale {
		if err := need(name+" b", b, extent(bs)); err != nil {
			return err
		}
	}
	if err := positive(name, (rows-1)*max(ds, as, bs)+cols); err != nil {
		return err
	}
	p, err := k.pipeline(eltwiseSpec(op))
	if err != nil {
		return err
	}
	gx, gy := k.grid(ceil(rows*cols, Lanes))
	s.Dispatch(p, []vk.Binding{dst, a, b},
		vk.Push(uint32(rows), uint32(cols), uint32(ds), uint32(as), uint32(bs), scale), gx, gy, 1)
	return nil
}

func eltwiseSpec(op uint32) vk.PipelineSpec { return spec("eltwise", 3, 24, 0, Lanes, op) }

// AddSpec is the pipeline Add and AddBias build.
func (k *Kernels) AddSpec() vk.PipelineSpec { return eltwiseSpec(opAdd) }

// GLU is the activation of a gated FFN, dst = act(gate) * up.
type GLU int

const (
	SwiGLU GLU = iota // act = silu (Llama, Qwen, Phi-3)
	GeGLU             // act = gelu in ggml_gelu's tanh form (Gemma)
)

func (g GLU) String() string {
	if g == GeGLU {
		return "geglu"
	}
	return "swiglu"
}

// check refuses an activation the kernels do not know.
func (g GLU) check() error {
	if g != SwiGLU && g != GeGLU {
		return fmt.Errorf("kernels: gated activation %d", int(g))
	}
	return nil
}

// eltwiseOp is g's OP in eltwise.comp.
func (g GLU) eltwiseOp() uint32 {
	if g == GeGLU {
		return opGeGLU
	}
	return opSwiGLU
}

// GatedSpec is the pipeline Gated builds for g.
func (k *Kernels) GatedSpec(g GLU) vk.PipelineSpec { return eltwiseSpec(g.eltwiseOp()) }

// CopyRowsSpec is the pipeline CopyRows builds.
func (k *Kernels) CopyRowsSpec() vk.PipelineSpec { return eltwiseSpec(opCopy) }

// ScaleSpec is the pipeline Scale builds.
func (k *Kernels) ScaleSpec() vk.PipelineSpec { return eltwiseSpec(opScale) }

// Add records dst = a + b over count values; dst may be a or b.
func (k *Kernels) Add(s *vk.Sequence, dst, a, b vk.Binding, count int) error {
	return k.eltwise(s, "add", opAdd, dst, a, b, 1, count, count, count, count, 0)
}

// Gated records dst = act(gate) * up over count values for activation g;
// dst may be gate or up.
func (k *Kernels) Gated(s *vk.Sequence, g GLU, dst, gate, up vk.Binding, count int) error {
	if err := g.check(); err != nil {
		return err
	}
	return k.eltwise(s, g.String(), g.eltwiseOp(), dst, gate, up, 1, count, count, count, count, 0)
}

// Scale records dst = x * f over count values; dst may be x.
func (k *Kernels) Scale(s *vk.Sequence, dst, x vk.Binding, count int, f float32) error {
	return k.eltwise(s, "scale", opScale, dst, x, x, 1, count, count, count, count, f)
}

// AddBias records dst[r] = x[r] + bias for rows x cols values; dst may be x.
func (k *Kernels) AddBias(s *vk.Sequence, dst, x, bias vk.Binding, rows, cols int) error {
	return k.eltwise(s, "add_bias", opAdd, dst, x, bias, rows, cols, cols, cols, 0, 0)
}

// CopyRows records dst[r][0:cols] = src[r][0:cols] for rows rows whose
// starts are dstStride and srcStride floats apart (e.g. splitting a fused
// QKV projection, or keeping the last row of a batch).
func (k *Kernels) CopyRows(s *vk.Sequence, dst, src vk.Binding, rows, cols, dstStride, srcStride int) error {
	return k.eltwise(s, "copy_rows", opCopy, dst, src, src, rows, cols, dstStride, srcStride, cols, 0)
}

// StoreKV records the conversion of n f32 rows of kvDim values (src) to f16
// and their store into cache [ctx][kvDim], positions pos..pos+n-1 of
// sequence seq (step holds uint32 pos, then seq: AppendRowTable's first pair),
// the cache holding a region of ctx rows per sequence, seq's from row
// seq*ctx. The cache is a ring of ctx slots (backend.Cache.Slots: the
// context for a global layer, less for a sliding-window one): position p
// goes to row p mod ctx, and of a batch longer than the ring only the last
// ctx rows are kept. With r not nil the rows are keys of kvDim/r.HeadDim
// heads, rotated by r on the way (src itself is left as it was).
func (k *Kernels) StoreKV(s *vk.Sequence, cache, src, step vk.Binding, n, kvDim, ctx int, r *RoPE) error {
	return k.storeKV(s, cache, src, step, n, kvDim, ctx, 1, r, false)
}

// StoreKVRows is StoreKV for rows that are one token each of distinct
// sequences: rows holds n (position, sequence) pairs of uint32 (AppendRowTable),
// and cache holds seqs regions of ctx rows, sequence q's ring in rows q*ctx
// … q*ctx+ctx-1. Row i, position p of sequence q, goes to row q*ctx + p mod
// ctx. Two rows of one sequence would race for their slots: the caller
// gives each sequence at most one row (backend.Cache.CheckRows).
func (k *Kernels) StoreKVRows(s *vk.Sequence, cache, src, rows vk.Binding, n, kvDim, ctx, seqs int, r *RoPE) error {
	if err := positive("kv_store", seqs, ctx, kvDim); err != nil {
		return err
	}
	return k.storeKV(s, cache, src, rows, n, kvDim, ctx, seqs, r, true)
}

func (k *Kernels) storeKV(s *vk.Sequence, cache, src, step vk.Binding, n, kvDim, ctx, seqs int, r *RoPE, rows bool) error {
	if err := positive("kv_store", n, kvDim); err != nil {
		return err
	}
	if err := positive("kv_store", ctx, kvDim); err != nil {
		return err
	}
	if kvDim%2 != 0 {
		return fmt.Errorf("kernels: kv_store: odd row of %d values", kvDim)
	}
	if err := need("kv_store cache", cache, 2*int64(seqs)*int64(ctx)*int64(kvDim)); err != nil {
		return err
	}
	if err := need("kv_store src", src, f32(n*kvDim)); err != nil {
		return err
	}
	if err := need("kv_store step", step, stepBytes(n, rows)); err != nil {
		return err
	}
	// Without a rotation the shader reads none of these but its push
	// constants; a valid identity keeps the check uniform.
	rope := RoPE{HeadDim: kvDim, Dims: 2, Base: 1, Scale: 1}
	if r != nil {
		rope = *r
	}
	ff, err := rope.check(k, "kv_store")
	if err != nil {
		return err
	}
	if rope.HeadDim < 1 || kvDim%rope.HeadDim != 0 {
		return fmt.Errorf("kernels: kv_store: rows of %d values are not whole heads of %d", kvDim, rope.HeadDim)
	}
	p, err := k.pipeline(k.storeKVSpec(r, rows))
	if err != nil {
		return err
	}
	pairs := kvDim / 2
	gx, gy := k.grid(ceil(n*pairs, Lanes))
	s.Dispatch(p, []vk.Binding{cache, src, step, ff},
		vk.Push(uint32(n), uint32(pairs), uint32(ctx), uint32(rope.HeadDim), uint32(rope.Dims),
			float32(math.Log2(float64(rope.Base))), rope.Scale),
		gx, gy, 1)
	return nil
}

// StoreKVSpec is the pipeline StoreKV builds for rotation r (nil: none).
func (k *Kernels) StoreKVSpec(r *RoPE) vk.PipelineSpec { return k.storeKVSpec(r, false) }

// StoreKVRowsSpec is the pipeline StoreKVRows builds for rotation r.
func (k *Kernels) StoreKVRowsSpec(r *RoPE) vk.PipelineSpec { return k.storeKVSpec(r, true) }

func (k *Kernels) storeKVSpec(r *RoPE, rows bool) vk.PipelineSpec {
	if r == nil {
		return spec("kv_store", 4, 28, 0, Lanes, 0, 0, 0, b32(rows))
	}
	return spec("kv_store", 4, 28, 0, Lanes, 1, b32(r.NeoX), b32(r.Factors != nil), b32(rows))
}

// Attn describes a causal attention over the f16 KV cache.
type Attn struct {
	Heads, KVHeads int // query heads; KV heads (Heads % KVHeads == 0)
	HeadDim        int // even, <= MaxHeadDim
	// Ctx is the rows of the K and V caches, a ring as StoreKV writes it:
	// the key at position p is row p mod Ctx.
	Ctx int
	// Window, when above 0, limits a query at position p to the keys at
	// p-Window+1 .. p (a sliding-window layer); 0 is causal over all.
	Window int
	Scale  float32
}

// MaxHeadDim is the largest head dimension Attention takes.
const MaxHeadDim = 256

// Attention records plain causal attention: for query row i of q [n][Heads *
// HeadDim] at position p = pos + i of sequence seq (step holds uint32 pos,
// then seq; the caches a region of Ctx rows per sequence), dst row i =
// softmax(Scale * q K^T) V over the keys at positions first..p of kc and vc
// ([Ctx][KVHeads*HeadDim] f16 rings, position k in row k mod Ctx), each
// query head reading KV head h / (Heads/KVHeads). first is p-Window+1 with
// a window, else 0, and never a position the ring no longer holds (before
// pos+n-Ctx): attention.Problem.First.
func (k *Kernels) Attention(s *vk.Sequence, dst, q, kc, vc, step vk.Binding, n int, a Attn) error {
	return k.attention(s, dst, q, kc, vc, step, n, 1, a, false)
}

// AttentionRows is Attention over rows that are one token each of their
// own sequence: rows holds n (position, sequence) pairs (AppendRowTable), kc and
// vc hold seqs regions of Ctx rows (sequence s's ring in rows s*Ctx …, as
// StoreKVRows writes them), and row i at position p attends to its
// sequence's keys at first..p, first as for a batch of one row.
func (k *Kernels) AttentionRows(s *vk.Sequence, dst, q, kc, vc, rows vk.Binding, n, seqs int, a Attn) error {
	if err := positive("attention", seqs, a.Ctx, a.KVHeads, a.HeadDim); err != nil {
		return err
	}
	return k.attention(s, dst, q, kc, vc, rows, n, seqs, a, true)
}

func (k *Kernels) attention(s *vk.Sequence, dst, q, kc, vc, step vk.Binding, n, seqs int, a Attn, rows bool) error {
	if err := positive("attention", n, a.Heads, a.HeadDim); err != nil {
		return err
	}
	if err := positive("attention", a.Ctx, a.KVHeads, a.HeadDim); err != nil {
		return err
	}
	if a.Heads%a.KVHeads != 0 || a.HeadDim%2 != 0 || a.HeadDim > MaxHeadDim {
		return fmt.Errorf("kernels: attention: %d heads over %d KV heads of %d values", a.Heads, a.KVHeads, a.HeadDim)
	}
	if a.Window < 0 || (!rows && n > a.Ctx) {
		return fmt.Errorf("kernels: attention: window %d, %d rows over a cache of %d", a.Window, n, a.Ctx)
	}
	if n > int(k.info.MaxWorkgroupCount[1]) || a.Heads > int(k.info.MaxWorkgroupCount[0]) {
		return fmt.Errorf("kernels: attention: %d rows x %d heads exceed the workgroup grid", n, a.Heads)
	}
	size := f32(n * a.Heads * a.HeadDim)
	if err := need("attention dst", dst, size); err != nil {
		return err
	}
	if err := need("attention q", q, size); err != nil {
		return err
	}
	cache := 2 * int64(seqs) * int64(a.Ctx) * int64(a.KVHeads*a.HeadDim)
	if err := need("attention k cache", kc, cache); err != nil {
		return err
	}
	if err := need("attention v cache", vc, cache); err != nil {
		return err
	}
	if err := need("attention step", step, stepBytes(n, rows)); err != nil {
		return err
	}
	p, err := k.pipeline(k.attentionSpec(rows))
	if err != nil {
		return err
	}
	s.Dispatch(p, []vk.Binding{dst, q, kc, vc, step},
		vk.Push(uint32(a.Heads), uint32(a.KVHeads), uint32(a.HeadDim), uint32(a.Ctx), a.Scale, uint32(a.Window)),
		uint32(a.Heads), uint32(n), 1)
	return nil
}

// AttentionSpec is the pipeline Attention builds.
func (k *Kernels) AttentionSpec() vk.PipelineSpec { return k.attentionSpec(false) }

// AttentionRowsSpec is the pipeline AttentionRows builds.
func (k *Kernels) AttentionRowsSpec() vk.PipelineSpec { return k.attentionSpec(true) }

func (k *Kernels) attentionSpec(rows bool) vk.PipelineSpec {
	return spec("causal_attn", 5, 24, 0, Lanes, k.subgroups(Lanes), MaxHeadDim, b32(rows))
}
