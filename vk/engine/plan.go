package engine

import (
	"fmt"

	"github.com/vkinfer/vkinfer/attention"
	"github.com/vkinfer/vkinfer/backend"
	"github.com/vkinfer/vkinfer/quant"
	"github.com/vkinfer/vkinfer/vk"
	"github.com/vkinfer/vkinfer/vk/flashattn"
	"github.com/vkinfer/vkinfer/vk/kernels"
)

// Pipeline is one compute pipeline a forward pass builds.
type Pipeline struct {
	// Kind is the pass: "decode" (a batch of one token), "rows" (one
	// token of each of several sequences, Model.Step's) or "prefill".
	Kind string
	// Op is what the pipeline computes for the pass: the kernel and the
	// weight shape and type, row length or attention plan it serves, such
	// as "matvec_q8 1024x4096 q6_K l64r2u1 +residual" (in a rows pass
	// followed by its number of sequences, ", 3 seqs").
	Op   string
	Wave int // flash attention's lane group; 0 for the other kernels
	Spec vk.PipelineSpec
}

// Plan is a backend that records nothing: a model loaded on it
// (model.Load; a header such as gguf.Header or synth.Header serves, as
// no weight is read) and prepared for some batch sizes (model.Prepare,
// and model.PrepareRows for the passes that decode several sequences
// together) lists in Pipelines every pipeline the engine's programs for those
// batches build, with the engine's choices (tuning profile, wave, integer
// dot products, plain attention), while nothing is allocated, uploaded,
// built or run. It decides as program does, call for call, through the
// same kernels and flashattn specs; TestPlanMatchesEngine holds the two
// together.
type Plan struct {
	e         *Engine
	cache     backend.Cache
	q8Weights bool // as Engine.q8Weights
	normQ8    bool // as Engine.normQ8
	list      []Pipeline
	seen      map[string]bool
}

// Plan returns a Plan with e's choices. Closing it leaves e open.
func (e *Engine) Plan() *Plan { return &Plan{e: e, seen: map[string]bool{}, normQ8: true} }

// Pipelines lists the pipelines of the programs recorded so far, each
// (kind, op, spec) once, in the order the passes first use them.
func (pl *Plan) Pipelines() []Pipeline { return append([]Pipeline(nil), pl.list...) }

// Name implements backend.Backend.
func (pl *Plan) Name() string { return pl.e.Name() + " (plan)" }

// Reserve implements backend.Backend: a plan holds no memory.
func (pl *Plan) Reserve(uint64, backend.Cache) error { return nil }

// Weight implements backend.Backend. The bytes are not read (a header's
// Data is nil): the weight is only its type and shape.
func (pl *Plan) Weight(name string, t quant.Type, rows, cols int, _ []byte) (backend.Tensor, error) {
	if !t.Supported() {
		return nil, fmt.Errorf("tensor %q: unsupported tensor type %s", name, t)
	}
	if _, err := t.RowBytes(cols); err != nil || rows < 1 {
		return nil, fmt.Errorf("tensor %q: %d×%d %s: %v", name, rows, cols, t, err)
	}
	pl.q8Weights = pl.q8Weights || pl.e.k.UseQ8(t)
	pl.normQ8 = pl.normQ8 && normQ8(pl.e.k, name, t)
	return &tensor{rows: rows, cols: cols, typ: t}, nil
}

// InitCache implements backend.Backend.
func (pl *Plan) InitCache(c backend.Cache) error {
	if err := checkCache(c); err != nil {
		return err
	}
	pl.cache = c
	return nil
}

// Record implements backend.Backend: the program lists its pipelines and
// cannot run.
func (pl *Plan) Record(n int, build func(backend.Ops)) (backend.Program, error) {
	return pl.record(n, false, build)
}

// RecordRows implements backend.MultiSeq, as Engine.RecordRows: the
// kernels in their row mode.
func (pl *Plan) RecordRows(n int, build func(backend.Ops)) (backend.Program, error) {
	return pl.record(n, true, build)
}

func (pl *Plan) record(n int, rows bool, build func(backend.Ops)) (backend.Program, error) {
	if err := checkRecord(n, rows, pl.cache, pl.cache.Layers != 0); err != nil {
		return nil, err
	}
	kind := "prefill"
	switch {
	case rows:
		kind = "rows"
	case n == 1:
		kind = "decode"
	}
	o := &planOps{pl: pl, n: n, rows: rows, kind: kind, q8: map[*tensor]bool{}, f16: map[f16Key]bool{}, routed: map[*tensor]int{},
		scaled: map[*tensor]float32{}}
	o.fz = pl.e.fuser(n, func(a, b *tensor) bool { return true })
	build(o)
	o.flush()
	if o.err != nil {
		return nil, o.err
	}
	return planProgram{}, nil
}

// Close implements backend.Backend; the engine stays open.
func (pl *Plan) Close() {}

type planProgram struct{}

func (planProgram) Run([]int32, int, []float32) error {
	return fmt.Errorf("vulkan: a plan's program lists pipelines and runs nothing")
}

func (planProgram) RunRows([]int32, []int32, []int32, []float32) error {
	return fmt.Errorf("vulkan: a plan's program lists pipelines and runs nothing")
}

func (planProgram) Close() {}

// planOps mirrors program: each op adds the pipelines program's op would
// build. Activations are tensors without buffers.
type planOps struct {
	pl   *Plan
	n    int
	rows bool // program.rows
	kind string
	// q8 holds the activations that have an 8-bit copy and whether it
	// holds their current values (program.q8).
	q8 map[*tensor]bool
	// f16 likewise holds the f16 copies (program.f16, f16b).
	f16  map[f16Key]bool
	prod *tensor // program.prod
	fz   fuser   // program.fz; a plan's weights have no buffers, and the
	// arena keeps a stack's in one (Engine.Weight)
	routed map[*tensor]int // program.routed
	norm   *normed         // program.norm
	err    error
	// hold and scaled are program's: a held residual product lists its
	// pipeline, with the fold's where it gets a NormOut (empty: a plan has
	// no bindings); scaled holds the folded norms' outputs with their eps.
	hold   normHold
	scaled map[*tensor]float32
}

// resolve is program.resolve.
func (o *planOps) resolve() {
	o.hold.resolve(func(n *heldNorm) { o.listNorm(n.d, n.x, n.w, n.eps) })
}

// fold is program.fold.
func (o *planOps) fold() {
	_, n := o.hold.take()
	n.add.record(&kernels.NormOut{}, nil)
	o.q8Out(n.d)
	o.q8[n.d] = true
	o.scaled[n.d] = n.eps
}

// normIn is program.normIn: whether a product of a reads a folded norm's
// copy, and the norm's eps.
func (o *planOps) normIn(a *tensor) (bool, float32) {
	eps, ok := o.scaled[a]
	return ok, eps
}

func (o *planOps) add(op string, wave int, s vk.PipelineSpec) {
	if o.hold.holding() {
		o.resolve()
	}
	o.norm = nil
	if o.rows {
		// Each row pass lists its pipelines: its products' column
		// counts and its attention's split depend on the sequences.
		op = fmt.Sprintf("%s, %d seqs", op, o.n)
	}
	key := fmt.Sprintf("%s|%s|%s|%v|%d", o.kind, op, s.Name, s.Spec, s.SubgroupSize)
	if o.pl.seen[key] {
		return
	}
	o.pl.seen[key] = true
	o.pl.list = append(o.pl.list, Pipeline{Kind: o.kind, Op: op, Wave: wave, Spec: s})
}

// f16Key names an activation's f16 copy in one layout: blocked, as
// matvec_coopmat reads it, or row after row.
type f16Key struct {
	t       *tensor
	blocked bool
}

// wrote marks the 8-bit and f16 copies of t stale, as program.op does for
// a write.
func (o *planOps) wrote(t *tensor) {
	delete(o.scaled, t)
	if _, ok := o.q8[t]; ok {
		o.q8[t] = false
	}
	delete(o.f16, f16Key{t, false})
	delete(o.f16, f16Key{t, true})
}

// f16Round lists the rounding of a into the f16 copy a product reads
// (program.refresh), unless a kernel filled it since a's last write.
func (o *planOps) f16Round(a *tensor, blocked bool) {
	if key := (f16Key{a, blocked}); !o.f16[key] {
		o.add(fmt.Sprintf("quantize_f16 %d", a.cols), 0, o.pl.e.k.QuantizeF16Spec(a.cols))
		o.f16[key] = true
	}
}

// f16Out is program.f16Out: whether a kernel writing t writes its f16
// copy too, which it then registers (after wrote).
func (o *planOps) f16Out(t *tensor) bool { return f16Able(o.pl.e.k, t) }

// filledF16 registers the f16 copy of t that a kernel wrote with it.
func (o *planOps) filledF16(t *tensor) {
	o.f16[f16Key{t, o.pl.e.k.CoopXBlocked(t.rows, t.cols) != 0}] = true
}

// q8Out is program.q8Out: whether a kernel writing t writes its 8-bit
// copy too (which it then registers).
func (o *planOps) q8Out(t *tensor) bool {
	if !o.pl.q8Weights || !q8Able(t) || coopF16Takes(o.pl.e.k, t) {
		return false
	}
	if _, ok := o.q8[t]; !ok {
		o.q8[t] = false
	}
	return true
}

func matrix(m *tensor) string { return fmt.Sprintf("%dx%d %s", m.rows, m.cols, m.typ) }

func (o *planOps) Tensor(rows, cols int) backend.Tensor {
	return &tensor{rows: rows, cols: cols, typ: quant.F32}
}

func (o *planOps) Embed(dst, table backend.Tensor) {
	o.flush()
	w := act(table)
	o.add("embed "+w.typ.String(), 0, o.pl.e.k.EmbedSpec(w.typ))
	o.wrote(act(dst))
}

func (o *planOps) RMSNorm(dst, x, w backend.Tensor, eps float32) {
	d := act(dst)
	if o.hold.holdNorm(o.pl.e.k, d, act(x), act(w), eps) {
		return
	}
	o.flush()
	o.listNorm(d, act(x), act(w), eps)
}

// listNorm is program.recordNorm.
func (o *planOps) listNorm(d, x, w *tensor, eps float32) {
	if o.f16Out(d) {
		o.add(fmt.Sprintf("rms_norm %d +f16", d.cols), 0, o.pl.e.k.RMSNormF16Spec(d.cols))
		o.norm = &normed{dst: d, x: x, w: w, eps: eps}
		o.wrote(d)
		o.filledF16(d)
		return
	}
	q8 := o.q8Out(d)
	op := fmt.Sprintf("rms_norm %d", d.cols)
	if q8 {
		op += " +q8"
	}
	o.add(op, 0, o.pl.e.k.RMSNormSpec(d.cols, q8))
	o.norm = &normed{dst: d, x: x, w: w, eps: eps}
	o.wrote(d)
	if q8 {
		o.q8[d] = true
	}
}

func (o *planOps) RMSNormAdd(dst, x, w, r backend.Tensor, eps float32) {
	o.flush()
	d := act(dst)
	o.add(fmt.Sprintf("rms_norm_add %d", d.cols), 0, o.pl.e.k.RMSNormAddSpec(d.cols))
	o.wrote(d)
}

func (o *planOps) MatMul(dst, w, x backend.Tensor) {
	d, m, a := act(dst), act(w), act(x)
	if o.hold.takes(o.pl.e.k, m, a) {
		o.fold()
	} else if o.hold.holding() {
		o.flush()
	}
	if o.fz.product(d, m, a) {
		return
	}
	o.flush()
	if o.fz.product(d, m, a) {
		return
	}
	o.matMul(d, m, a)
}

// matMul is program.matMul.
func (o *planOps) matMul(d, m, a *tensor) {
	k := o.pl.e.k
	switch {
	case k.UseCoopInt8(m.typ, a.rows, a.cols):
		if !o.q8[a] {
			o.add(fmt.Sprintf("quantize_q8 %d", a.cols), 0, k.QuantizeQ8Spec())
			o.q8[a] = true
		}
		tile := k.CoopInt8TileForShape(m.typ, m.rows, a.rows)
		o.add(fmt.Sprintf("matmul_coopmat_i8 %s %s", matrix(m), tile), 0, k.MatMulCoopInt8Spec(m.typ, tile))
	case k.UseCoop(m.typ, a.rows, a.cols):
		o.f16Round(a, k.UseMatVecCoop(m.typ, a.rows, a.cols))
		if k.UseMatVecCoop(m.typ, a.rows, a.cols) {
			ps, kernel, shape := k.CoopProductSpec(m.typ, a.rows, m.rows, m.cols)
			o.add(fmt.Sprintf("%s %s %s", kernel, matrix(m), shape), 0, ps)
			break
		}
		o.coopTiles(m, a, false)
	case k.UseQ8(m.typ):
		o.productQ8(d, m, a, false, false)
	case k.MatVecTakes(a.rows):
		o.add(fmt.Sprintf("matvec %s %s", matrix(m), k.MatVec), 0, k.ProductSpec(m.typ, a.rows))
	default:
		o.add(fmt.Sprintf("matmul %s %s", matrix(m), k.TileFor(m.typ)), 0, k.ProductSpec(m.typ, a.rows))
	}
	o.wrote(d)
}

// coopTiles lists matmul_coopmat's product of m and a: whole, or with K
// in parts and their sum (plus the residual with resid), as
// program.productCoop records it.
func (o *planOps) coopTiles(m, a *tensor, resid bool) {
	k := o.pl.e.k
	tile, splits := k.CoopSplitFor(m.typ, a.rows, m.rows, m.cols)
	if splits == 1 {
		o.add(fmt.Sprintf("matmul_coopmat %s %s", matrix(m), tile), 0, k.MatMulCoopSpec(m.typ, tile))
		return
	}
	o.add(fmt.Sprintf("matmul_coopmat %s %s k/%d", matrix(m), tile, splits), 0, k.MatMulCoopSplitSpec(m.typ, tile, splits))
	name := "split_sum"
	if resid {
		name += " +residual"
	}
	o.add(name, 0, k.SplitSumSpec(resid))
}

// splitAdds is program.splitAdds.
func (o *planOps) splitAdds(m, a *tensor) bool {
	k := o.pl.e.k
	if !k.UseCoop(m.typ, a.rows, a.cols) || k.UseCoopInt8(m.typ, a.rows, a.cols) {
		return false
	}
	_, splits := k.CoopSplitFor(m.typ, a.rows, m.rows, m.cols)
	return splits > 1
}

func (o *planOps) MatMulAdd(dst, w, x, r backend.Tensor) {
	o.flush()
	d, m, a := act(dst), act(w), act(x)
	k := o.pl.e.k
	switch {
	case k.UseMatVecCoop(m.typ, a.rows, a.cols):
		o.f16Round(a, true)
		sh := k.MatVecCoopFor(m.typ, a.rows, m.rows, m.cols)
		o.add(fmt.Sprintf("matvec_coopmat %s %s +residual", matrix(m), sh), 0, k.MatVecCoopSpec(m.typ, sh, true))
	case o.splitAdds(m, a):
		o.f16Round(a, false)
		o.coopTiles(m, a, true)
	case !k.MatVecTakes(a.rows):
		if o.prod == nil || o.prod.rows != d.rows || o.prod.cols != d.cols {
			o.prod = act(o.Tensor(d.rows, d.cols))
		}
		o.MatMul(o.prod, w, x)
		o.Add(dst, r, o.prod)
		return
	case k.UseQ8(m.typ):
		_, scaledIn := o.scaled[a]
		if o.hold.holdAdd(o.fz.on, o.pl.normQ8, scaledIn, d, addFolds(k, m),
			func(out *kernels.NormOut, _ []vk.Binding) { o.productQ8(d, m, a, true, out != nil); o.wrote(d) }) {
			return
		}
		o.productQ8(d, m, a, true, false)
	default:
		o.add(fmt.Sprintf("matvec %s %s +residual", matrix(m), k.MatVec), 0,
			k.MatVecSpec(m.typ, a.rows, k.MatVec, true, false))
	}
	o.wrote(d)
}

// productQ8 is program.productQ8.
func (o *planOps) productQ8(d, m, a *tensor, residual, out bool) {
	k := o.pl.e.k
	in, eps := o.normIn(a)
	if !o.q8[a] && !in {
		o.add(fmt.Sprintf("quantize_q8 %d", a.cols), 0, k.QuantizeQ8Spec())
		o.q8[a] = true
	}
	if !k.MatVecTakes(a.rows) {
		tile := k.TileQ8For(a.rows)
		o.add(fmt.Sprintf("matmul_q8 %s %s", matrix(m), tile), 0, k.MatMulQ8Spec(m.typ, tile))
		return
	}
	sh := k.MatVecQ8For(m.rows, m.cols)
	op := fmt.Sprintf("matvec_q8 %s %s", matrix(m), sh)
	if residual {
		op += " +residual"
	}
	switch {
	case out:
		op += " +norm"
	case in:
		op += " on a folded norm"
	}
	o.add(op, 0, k.MatVecNormSpec(m.typ, a.rows, sh, residual, out, in, eps))
}

func (o *planOps) AddBias(x, b backend.Tensor) {
	t := act(x)
	if o.fz.bias(t, act(b)) {
		return
	}
	o.flush()
	o.add(fmt.Sprintf("add_bias %d", t.cols), 0, o.pl.e.k.AddSpec())
	o.wrote(t)
}

func (o *planOps) Add(dst, a, b backend.Tensor) {
	o.flush()
	d := act(dst)
	o.add(fmt.Sprintf("add %d", d.cols), 0, o.pl.e.k.AddSpec())
	o.wrote(d)
}

// rope names a rotation of heads of r.
func rope(heads int, r kernels.RoPE) string {
	s := fmt.Sprintf("%dx%d", heads, r.HeadDim)
	if r.NeoX {
		s += " neox"
	}
	if r.Factors != nil {
		s += " factors"
	}
	return s
}

func (o *planOps) RoPE(x backend.Tensor, r backend.RoPE) {
	if o.fz.headRope(act(x), r) || o.fz.rope(act(x), r) {
		return
	}
	o.flush()
	o.rope(act(x), r)
}

// rope is program.rope.
func (o *planOps) rope(x *tensor, r backend.RoPE) {
	kr, _ := kernelRoPE(r)
	spec := o.pl.e.k.RopeSpec(kr)
	if o.rows {
		spec = o.pl.e.k.RopeRowsSpec(kr)
	}
	o.add("rope "+rope(r.Heads, kr), 0, spec)
	o.wrote(x)
}

func (o *planOps) StoreKV(layer int, k, v backend.Tensor, r *backend.RoPE) {
	if layer < 0 || layer >= o.pl.cache.Layers {
		o.fail(fmt.Errorf("store_kv: layer %d of %d", layer, o.pl.cache.Layers))
		return
	}
	if o.fz.headStore(layer, act(k), act(v), r) || o.fz.storeKV(layer, act(k), act(v), r) {
		return
	}
	o.flush()
	storeSpec := o.pl.e.k.StoreKVSpec
	if o.rows {
		storeSpec = o.pl.e.k.StoreKVRowsSpec
	}
	if r == nil {
		o.add("kv_store k", 0, storeSpec(nil))
	} else {
		kr, _ := kernelRoPE(*r)
		o.add("kv_store k rope "+rope(r.Heads, kr), 0, storeSpec(&kr))
	}
	o.add("kv_store v", 0, storeSpec(nil))
}

func (o *planOps) Attend(dst, q backend.Tensor, layer int, a backend.Attention) {
	o.flush()
	c, e := o.pl.cache, o.pl.e
	if layer < 0 || layer >= c.Layers {
		o.fail(fmt.Errorf("attention: layer %d of %d", layer, c.Layers))
		return
	}
	if err := c.CheckWindow(layer, c.PerSeq(o.n, o.rows), a.Window); err != nil { // program.Attend's
		o.fail(fmt.Errorf("attention: %w", err))
		return
	}
	d := act(dst)
	o.wrote(d)
	if e.plainAttention(a) {
		if o.rows {
			o.add("causal_attn", 0, e.k.AttentionRowsSpec())
		} else {
			o.add("causal_attn", 0, e.k.AttentionSpec())
		}
		return
	}
	sh := flashattn.Shape{Queries: o.n, Heads: a.Heads, KVHeads: a.KVHeads, HeadDim: a.HeadDim, Context: c.Slots(layer), Window: a.Window, Scale: a.Scale}
	if o.rows {
		sh.Rows, sh.Seqs = true, c.Sequences()
	}
	fa, err := e.flashFor(sh)
	if err != nil {
		o.fail(err)
		return
	}
	plan, err := fa.Plan(sh)
	if err != nil {
		o.fail(err)
		return
	}
	q8 := fa.WritesQ8(sh) && o.q8Out(d)
	specs, err := fa.Specs(sh, q8)
	if err != nil {
		o.fail(err)
		return
	}
	for _, s := range specs {
		// The split prefill's merge pass is no lane-group kernel: it
		// takes the driver's subgroup size.
		op, wave := fmt.Sprintf("%s of %d splits, head dim %d", s.Name, plan.Splits, a.HeadDim), 0
		if s.Name == plan.Shader() {
			op, wave = attentionOp(plan), plan.Wave.W
		}
		if q8 {
			op += " +q8"
		}
		o.add(op, wave, s)
	}
	if q8 {
		o.q8[d] = true
	}
}

// attentionOp names a flash-attention kernel by its plan's geometry (the
// subgroups the lane group runs on are the driver's report).
func attentionOp(p attention.Plan) string {
	s := fmt.Sprintf("%s wave%d Br=%d heads/wg=%d Bc=%d splits=%d", p.Shader(), p.Wave.W, p.Br, p.Heads, p.Bc, p.Splits)
	if p.Groups > 1 {
		s += fmt.Sprintf(" groups=%d", p.Groups)
	}
	if p.Stage {
		s += " staged"
	}
	return s
}

func (o *planOps) SwiGLU(dst, gate, up backend.Tensor) { o.gated(kernels.SwiGLU, dst, gate, up) }

// gated is program.gated.
func (o *planOps) gated(g kernels.GLU, dst, gate, up backend.Tensor) {
	d, a, u := act(dst), act(gate), act(up)
	if o.fz.gatedExperts(g, d, a, u) {
		return
	}
	if o.fz.gated(g, d, a, u, o.q8Out(d)) {
		return
	}
	o.flush()
	if o.f16Out(d) && a.rows == d.rows && u.rows == d.rows {
		o.add(fmt.Sprintf("%s %d +f16", g, d.cols), 0, o.pl.e.k.GatedF16Spec(g, d.cols))
		o.wrote(d)
		o.filledF16(d)
		return
	}
	q8 := o.q8Out(d) && q8Able(a) && q8Able(u)
	o.wrote(d)
	if q8 {
		o.add(fmt.Sprintf("%s %d +q8", g, d.cols), 0, o.pl.e.k.GatedQ8Spec(g))
		o.q8[d] = true
		return
	}
	o.add(fmt.Sprintf("%s %d", g, d.cols), 0, o.pl.e.k.GatedSpec(g))
}

func (o *planOps) HeadNorm(x, w backend.Tensor, headDim int, eps float32) {
	t, g := act(x), act(w)
	if err := checkHeadNorm(t, g, headDim); err != nil {
		o.flush()
		o.fail(err)
		return
	}
	if o.fz.headNorm(t, g, headDim, eps) {
		return
	}
	o.flush()
	if !o.fz.startHeads(t, g, headDim, eps) {
		o.headNorm(t, headDim)
	}
}

// headNorm is program.headNorm.
func (o *planOps) headNorm(t *tensor, headDim int) {
	o.add(fmt.Sprintf("head_norm %d", headDim), 0, o.pl.e.k.RMSNormSpec(headDim, false))
	o.wrote(t)
}

// recordHeads is program.recordHeads.
func (o *planOps) recordHeads(h *headChain) {
	if !h.stored {
		o.headNorm(h.q, h.headDim)
		if h.k != nil {
			o.headNorm(h.k, h.headDim)
		}
		if h.rope != nil {
			o.rope(h.q, *h.rope)
		}
		return
	}
	hr := h.headRope()
	hr.Rows = o.rows
	kr, _ := kernelRoPE(*h.kRope)
	o.add(fmt.Sprintf("head_rope %d+%dx%d %s", hr.Heads, hr.KVHeads, h.headDim, rope(h.kRope.Heads, kr)), 0, o.pl.e.k.HeadRopeSpec(hr))
	o.wrote(h.q)
}

func (o *planOps) GeGLU(dst, gate, up backend.Tensor) { o.gated(kernels.GeGLU, dst, gate, up) }

func (o *planOps) Scale(x backend.Tensor, s float32) {
	o.flush()
	o.add("scale", 0, o.pl.e.k.ScaleSpec())
	o.wrote(act(x))
}

func (o *planOps) CopyRows(dst, x backend.Tensor, first int) {
	o.flush()
	d := act(dst)
	o.add(fmt.Sprintf("copy_rows %d", d.cols), 0, o.pl.e.k.CopyRowsSpec())
	o.wrote(d)
}

func (o *planOps) Output(backend.Tensor) {}

func (o *planOps) fail(err error) {
	if o.err == nil {
		o.err = fmt.Errorf("vulkan: %w", err)
	}
}

// flush is program.flush.
func (o *planOps) flush() {
	k := o.pl.e.k
	if o.hold.holding() {
		o.resolve()
	}
	if h := o.fz.takeHeads(); h != nil {
		o.recordHeads(h)
	}
	for _, fu := range o.fz.take() {
		if fu.plain() {
			o.matMul(fu.mats[0].dst, fu.mats[0].w, fu.x)
			continue
		}
		in, eps := o.normIn(fu.x)
		if fu.q8 && !o.q8[fu.x] && !in {
			o.add(fmt.Sprintf("quantize_q8 %d", fu.x.cols), 0, k.QuantizeQ8Spec())
			o.q8[fu.x] = true
		}
		st := fu.stack(o.n, 0, vk.Binding{}, vk.Binding{})
		st.Seqs, st.Rows = o.pl.cache.Sequences(), o.rows
		if fu.q8 && in {
			st.NormIn = &kernels.NormIn{Eps: eps}
		}
		o.add(stackOp(k, fu, st), 0, k.StackSpec(st))
		for j, m := range fu.mats {
			if m.cache == 0 && (fu.gated == nil || j == 0) {
				o.wrote(m.dst)
			}
		}
		if fu.gated != nil {
			o.wrote(fu.gdst)
			if fu.gq8 {
				o.q8[fu.gdst] = true
			}
		}
	}
	if e := o.fz.takeExpert(); e != nil {
		o.matVecID(e)
	}
}

// stackOp names a stacked product by its matrices, shape and epilogues,
// such as "matvec_stack_q8 4096+1024+1024x4096 q4_K 32l2r1u +rope+kv".
func stackOp(k *kernels.Kernels, fu *fusion, st *kernels.Stack) string {
	name := "matvec_stack"
	if st.Q8 {
		name += "_q8"
	}
	rows := ""
	for j, m := range fu.mats {
		if j > 0 {
			rows += "+"
		}
		rows += fmt.Sprint(m.w.rows)
	}
	types := st.Type.String()
	if fu.mixed() {
		types += "+" + st.LastType.String()
	}
	op := fmt.Sprintf("%s %sx%d %s %s", name, rows, st.K, types, k.StackShape(st))
	for _, m := range fu.mats {
		if m.bias != nil {
			op += " +bias"
			break
		}
	}
	if fu.rope != nil {
		op += " +rope"
	}
	if fu.caches() {
		op += " +kv"
	}
	if fu.gated != nil {
		op += fmt.Sprintf(" +%s", *fu.gated)
		if fu.gq8 {
			op += "+q8"
		}
	}
	return op
}
