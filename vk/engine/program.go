package engine

import (
	"encoding/binary"
	"fmt"

	"github.com/vkinfer/vkinfer/backend"
	"github.com/vkinfer/vkinfer/quant"
	"github.com/vkinfer/vkinfer/vk"
	"github.com/vkinfer/vkinfer/vk/flashattn"
	"github.com/vkinfer/vkinfer/vk/kernels"
)

// tensor is a weight (GGUF encoding) or an f32 activation in a device buffer.
type tensor struct {
	rows, cols int
	typ        quant.Type
	b          vk.Binding
}

func (t *tensor) Rows() int { return t.rows }
func (t *tensor) Cols() int { return t.cols }

func act(t backend.Tensor) *tensor { return t.(*tensor) }

// program is a recorded forward pass. The token ids, the positions and
// the sequences are the only inputs; they live in small host-visible
// buffers written before each replay, so the command buffer is recorded
// once.
type program struct {
	e   *Engine
	n   int
	seq *vk.Sequence
	// rows: the n rows are tokens of sequences at their own positions
	// (RecordRows), and the kernels that place them read the step
	// buffer as a (position, sequence) pair per row
	// (kernels.AppendRowTable);
	// otherwise it holds the first position and the one sequence.
	rows   bool
	owned  []*vk.Buffer
	tokens *vk.Buffer // int32[n], host-visible
	step   *vk.Buffer // host-visible, see rows
	vocab  int        // rows of the embedding table, for the token range check
	out    []*tensor
	host   *vk.Buffer // host-visible copy of the outputs
	outLen int
	err    error
	// tokBuf and stepBuf hold what a run writes into tokens and step,
	// kept so that a token's run allocates nothing.
	tokBuf, stepBuf []byte
	// faScratch holds flash attention's split-k partials.
	faScratch *vk.Buffer
	// splitPart holds the partial products of matmul_coopmat with K in
	// parts (productCoop), shared by every such product of the program.
	splitPart *vk.Buffer
	// routerParts holds a prefill router's product in parts of K
	// (kernels.RouterParts), shared by every layer's router.
	routerParts *vk.Buffer
	// prod holds MatMulAdd's product where it is not fused.
	prod *tensor
	// q8 holds the 8-bit copies of activations (kernels.QuantizeQ8) that
	// decode's matrix-vector products read, by the activation's binding;
	// a copy is stale once its source buffer is written again (see op).
	q8 map[vk.Binding]*actCopy
	// f16 holds the f16 copies (kernels.QuantizeF16) that prefill's
	// cooperative-matrix products read, kept like q8.
	f16 map[vk.Binding]*actCopy
	// f16b holds the f16 copies in the blocked layout that matvec_coopmat
	// reads (kernels.QuantizeF16Blocked), kept like q8.
	f16b map[vk.Binding]*actCopy
	// read and written are the buffers the dispatches since the last
	// barrier read and wrote (see op).
	read, written map[*vk.Buffer]bool
	// fz gathers decode's fused products (fuse.go); every op it does not
	// take records what it holds first (flush).
	fz fuser
	// traffic is what each profiled dispatch reads, in recording order
	// (count), and layer the layer of the latest one; empty without
	// profiling.
	traffic []traffic
	layer   int
	// routed holds the id tensors Route writes, with the number of experts
	// routed among: MatMulID takes no others (moe.go).
	routed map[*tensor]int
	// norm is the last op recorded when it was an RMSNorm (FuseRouter).
	norm *normed
	// sorts holds a prefill's pairs sorted by expert (moe_sort), kept
	// like q8 and stale once Route writes their ids again.
	sorts map[sortKey]*actCopy
	// hold is a residual product and the norm after it, held for a fold
	// (normfold.go); scaled the folded norms' outputs, and normParts their
	// block sums.
	hold      normHold
	scaled    map[*tensor]*folded
	normParts *vk.Buffer
}

// actCopy is an activation rounded to 8 bits or to f16.
type actCopy struct {
	b     vk.Binding
	fresh bool // holds the source's current values
}

func newProgram(e *Engine, n int, rows bool) (*program, error) {
	p := &program{e: e, n: n, rows: rows, seq: e.dev.NewSequence(), tokBuf: make([]byte, 4*n), stepBuf: make([]byte, 0, 8*n),
		read: map[*vk.Buffer]bool{}, written: map[*vk.Buffer]bool{}, q8: map[vk.Binding]*actCopy{}, f16: map[vk.Binding]*actCopy{}, f16b: map[vk.Binding]*actCopy{},
		layer: -1, routed: map[*tensor]int{}, sorts: map[sortKey]*actCopy{}, scaled: map[*tensor]*folded{}}
	p.fz = e.fuser(n, func(a, b *tensor) bool { return a.b.Buf == b.b.Buf })
	var err error
	if p.tokens, err = p.buffer(4*int64(n), true); err != nil {
		p.Close()
		return nil, err
	}
	if p.step, err = p.buffer(max(16, 8*int64(n)), true); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

func (p *program) buffer(size int64, host bool) (*vk.Buffer, error) {
	b, err := p.e.dev.NewBuffer(size, host)
	if err != nil {
		return nil, fmt.Errorf("vulkan: %w", err)
	}
	p.owned = append(p.owned, b)
	return b, nil
}

// scratch returns the first size bytes of *b, a scratch buffer the
// program owns and shares between ops that a barrier separates, first
// replacing it with a larger one where it is smaller; false (the error
// kept for Record) if that cannot be allocated.
func (p *program) scratch(b **vk.Buffer, size int64) (vk.Binding, bool) {
	if *b == nil || (*b).Size() < size {
		nb, err := p.buffer(size, false)
		if err != nil {
			p.fail(err)
			return vk.Binding{}, false
		}
		*b = nb
	}
	return vk.Binding{Buf: *b, Size: size}, true
}

// op records one kernel that reads the ranges of reads and writes those
// of writes: the barriers look at their buffers, the profile's waterfall
// at the bytes read (count). A barrier goes before it only when it depends on a dispatch
// since the last one: it reads or writes what one wrote, or writes what one
// read. Independent neighbours (the q, k and v projections; gate and up)
// then overlap on the GPU instead of each draining it first, which in
// decode costs more than many of the kernels themselves. The first error is
// kept and returned by Record.
func (p *program) op(reads, writes []vk.Binding, record func() error) {
	if p.hold.holding() {
		p.resolve()
	}
	p.foldedReads(reads, writes)
	p.norm = nil
	hazard := false
	for _, b := range reads {
		hazard = hazard || p.written[b.Buf]
	}
	for _, b := range writes {
		hazard = hazard || p.written[b.Buf] || p.read[b.Buf]
	}
	if hazard {
		p.seq.Barrier()
		clear(p.read)
		clear(p.written)
	}
	first := p.seq.Profiled()
	p.fail(record())
	if p.e.o.Profile {
		p.count(first, reads, writes)
	}
	for _, b := range reads {
		p.read[b.Buf] = true
	}
	for _, b := range writes {
		p.written[b.Buf] = true
		for _, copies := range []map[vk.Binding]*actCopy{p.q8, p.f16, p.f16b} {
			for src, c := range copies {
				c.fresh = c.fresh && src.Buf != b.Buf
			}
		}
		for key, c := range p.sorts {
			c.fresh = c.fresh && key.ids.Buf != b.Buf
		}
	}
}

// fail keeps the first error, which Record returns.
func (p *program) fail(err error) {
	if err != nil && p.err == nil {
		p.err = fmt.Errorf("vulkan: %w", err)
	}
}

func bindings(b ...vk.Binding) []vk.Binding { return b }

func whole(b *vk.Buffer) vk.Binding { return vk.Binding{Buf: b} }

func (p *program) Tensor(rows, cols int) backend.Tensor {
	t := &tensor{rows: rows, cols: cols, typ: quant.F32}
	b, err := p.buffer(4*int64(rows)*int64(cols), false)
	if err != nil {
		p.fail(err)
		return t
	}
	t.b = whole(b)
	return t
}

func (p *program) Embed(dst, table backend.Tensor) {
	p.flush()
	d, w := act(dst), act(table)
	p.vocab = w.rows
	// It reads one row of the table per token: the range listed is that
	// many rows' bytes, for the waterfall.
	rows := w.b
	if rb, err := w.typ.RowBytes(w.cols); err == nil {
		rows.Size = min(int64(rb)*int64(p.n), w.b.Size)
	}
	p.op(bindings(rows, whole(p.tokens)), bindings(d.b), func() error {
		return p.e.k.Embed(p.seq, d.b, w.b, whole(p.tokens), w.typ, p.n, w.rows, w.cols)
	})
}

func (p *program) RMSNorm(dst, x, w backend.Tensor, eps float32) {
	d, a, g := act(dst), act(x), act(w)
	if p.hold.holdNorm(p.e.k, d, a, g, eps) {
		return
	}
	p.flush()
	p.recordNorm(d, a, g, eps)
}

// recordNorm records RMSNorm d = norm(a)·g, writing the copies the
// products of d read.
func (p *program) recordNorm(d, a, g *tensor, eps float32) {
	defer func() { p.norm = &normed{dst: d, x: a, w: g, eps: eps} }()
	if c, blocked := p.f16Out(d); c != nil {
		// The result feeds products on the matrix units, which will want
		// it in f16; the norm writes that copy as well.
		p.op(bindings(a.b, g.b), bindings(d.b, c.b), func() error {
			return p.e.k.RMSNormF16(p.seq, c.b, d.b, a.b, g.b, d.rows, d.cols, blocked, eps)
		})
		c.fresh = true
		return
	}
	if c := p.q8Out(d); c != nil {
		// The result feeds products, which will want it in 8 bits; the
		// norm writes that copy as well.
		p.op(bindings(a.b, g.b), bindings(d.b, c.b), func() error {
			return p.e.k.RMSNormQ8(p.seq, d.b, c.b, a.b, g.b, d.rows, d.cols, eps)
		})
		c.fresh = true
		return
	}
	p.op(bindings(a.b, g.b), bindings(d.b), func() error {
		return p.e.k.RMSNorm(p.seq, d.b, a.b, g.b, d.rows, d.cols, eps)
	})
}

// RMSNormAdd is kernels.RMSNormAdd. It writes no q8 copy (unlike RMSNorm):
// its result is the residual stream, which the next norm reads, not a
// product. op marks dst's copies stale like any write.
func (p *program) RMSNormAdd(dst, x, w, r backend.Tensor, eps float32) {
	p.flush()
	d, a, g, res := act(dst), act(x), act(w), act(r)
	if res.rows != a.rows || res.cols != a.cols || d.rows != a.rows || d.cols != a.cols {
		p.fail(fmt.Errorf("rms_norm_add: dst %dx%d, x %dx%d, residual %dx%d", d.rows, d.cols, a.rows, a.cols, res.rows, res.cols))
		return
	}
	p.op(bindings(a.b, g.b, res.b), bindings(d.b), func() error {
		return p.e.k.RMSNormAdd(p.seq, d.b, a.b, g.b, res.b, d.rows, d.cols, eps)
	})
}

func (p *program) MatMul(dst, w, x backend.Tensor) {
	d, m, a := act(dst), act(w), act(x)
	if p.hold.takes(p.e.k, m, a) {
		p.fold()
	} else if p.hold.holding() {
		p.flush()
	}
	if p.fz.product(d, m, a) {
		return
	}
	p.flush()
	if p.fz.product(d, m, a) { // the first of a new fusion
		return
	}
	p.matMul(d, m, a)
}

// matMul records dst = w·x on its own.
func (p *program) matMul(d, m, a *tensor) {
	if p.e.k.UseCoop(m.typ, a.rows, a.cols) {
		p.productCoop(d, m, a, nil)
		return
	}
	if p.e.k.UseQ8(m.typ) {
		p.productQ8(d, m, a, nil, nil)
		return
	}
	p.op(bindings(m.b, a.b), bindings(d.b), func() error {
		return p.e.k.MatMul(p.seq, d.b, m.b, a.b, m.typ, a.rows, m.rows, m.cols)
	})
}

func (p *program) MatMulAdd(dst, w, x, r backend.Tensor) {
	p.flush()
	d, m, a, res := act(dst), act(w), act(x), act(r)
	if p.e.k.UseMatVecCoop(m.typ, a.rows, a.cols) || p.splitAdds(m, a) {
		p.productCoop(d, m, a, res)
		return
	}
	if !p.e.k.MatVecTakes(a.rows) {
		// The tiled kernel has no residual input: a product into a scratch
		// tensor (one per program, reused by every layer), then an add.
		if p.prod == nil || p.prod.rows != d.rows || p.prod.cols != d.cols {
			p.prod = act(p.Tensor(d.rows, d.cols))
		}
		p.MatMul(p.prod, w, x)
		p.Add(dst, r, p.prod)
		return
	}
	if p.e.k.UseQ8(m.typ) {
		_, scaledIn := p.scaled[a]
		if p.hold.holdAdd(p.fz.on, p.e.normQ8, scaledIn, d, addFolds(p.e.k, m),
			func(out *kernels.NormOut, writes []vk.Binding) { p.productQ8(d, m, a, res, out, writes...) }) {
			return
		}
		p.productQ8(d, m, a, res, nil)
		return
	}
	p.op(bindings(m.b, a.b, res.b), bindings(d.b), func() error {
		return p.e.k.MatVecAdd(p.seq, d.b, m.b, a.b, res.b, m.typ, a.rows, m.rows, m.cols)
	})
}

// q8Copy returns the 8-bit copy of activation t, made on first use; nil
// (with the error kept for Record) if it cannot be allocated.
func (p *program) q8Copy(t *tensor) *actCopy {
	return p.copyOf(p.q8, t, kernels.Q8Bytes(t.rows, t.cols))
}

// copyOf returns copies' entry for activation t, a buffer of size bytes
// made on first use; nil (with the error kept for Record) if it cannot be
// allocated.
func (p *program) copyOf(copies map[vk.Binding]*actCopy, t *tensor, size int64) *actCopy {
	c := copies[t.b]
	if c == nil {
		b, err := p.buffer(size, false)
		if err != nil {
			p.fail(err)
			return nil
		}
		c = &actCopy{b: whole(b)}
		copies[t.b] = c
	}
	return c
}

// f16Copy returns the f16 copy of activation t that the cooperative-matrix
// products read, made on first use: in matvec_coopmat's blocked layout
// where blocked is set, else row after row (a scratch tensor may feed
// products of both kinds, so each layout has copies of its own); nil (with
// the error kept for Record) if it cannot be allocated.
func (p *program) f16Copy(t *tensor, blocked bool) *actCopy {
	if blocked {
		return p.copyOf(p.f16b, t, p.e.k.CoopXBytes(t.rows, t.cols))
	}
	return p.copyOf(p.f16, t, kernels.F16Bytes(t.rows, t.cols))
}

// refresh records the rounding of activation a into its copy c unless c
// already holds a's current values.
func (p *program) refresh(c *actCopy, a *tensor, round func(s *vk.Sequence, dst, src vk.Binding, rows, cols int) error) {
	if c.fresh {
		return
	}
	p.op(bindings(a.b), bindings(c.b), func() error { return round(p.seq, c.b, a.b, a.rows, a.cols) })
	c.fresh = true
}

// productCoop records dst = w·x (+ r where r is not nil: matvec_coopmat
// only) on the matrix units (prefill, and narrow batches with
// NarrowCoop), on the f16 copy of x, rounding x first unless it was since
// its last write (the q, k and v projections share one copy, as gate and
// up do); or, where the integer variant takes the weights, on the 8-bit
// copy of x, which the kernel that wrote x may have filled as it went
// (q8Out).
func (p *program) productCoop(d, m, a, r *tensor) {
	if p.e.k.UseCoopInt8(m.typ, a.rows, a.cols) { // never with r: not a narrow batch's
		c := p.q8Copy(a)
		if c == nil {
			return
		}
		p.refresh(c, a, p.e.k.QuantizeQ8)
		p.op(bindings(m.b, c.b), bindings(d.b), func() error {
			return p.e.k.MatMulCoopInt8(p.seq, d.b, m.b, c.b, m.typ, a.rows, m.rows, m.cols, p.e.k.CoopInt8TileForShape(m.typ, m.rows, a.rows))
		})
		return
	}
	narrow := p.e.k.UseMatVecCoop(m.typ, a.rows, a.cols)
	c := p.f16Copy(a, narrow)
	if c == nil {
		return
	}
	if narrow {
		cols := p.e.k.MatVecCoopCols(p.e.k.MatVecCoopFor(m.typ, a.rows, m.rows, m.cols), a.rows)
		p.refresh(c, a, func(s *vk.Sequence, dst, src vk.Binding, rows, k int) error {
			return p.e.k.QuantizeF16Blocked(s, dst, src, rows, k, cols)
		})
	} else {
		p.refresh(c, a, p.e.k.QuantizeF16)
	}
	if r != nil && narrow {
		p.op(bindings(m.b, c.b, r.b), bindings(d.b), func() error {
			return p.e.k.MatVecCoopAdd(p.seq, d.b, m.b, c.b, r.b, m.typ, a.rows, m.rows, m.cols)
		})
		return
	}
	if narrow {
		p.op(bindings(m.b, c.b), bindings(d.b), func() error {
			return p.e.k.CoopProduct(p.seq, d.b, m.b, c.b, m.typ, a.rows, m.rows, m.cols)
		})
		return
	}
	tile, splits := p.e.k.CoopSplitFor(m.typ, a.rows, m.rows, m.cols)
	if splits == 1 {
		p.op(bindings(m.b, c.b), bindings(d.b), func() error {
			return p.e.k.MatMulCoop(p.seq, d.b, m.b, c.b, m.typ, a.rows, m.rows, m.cols, tile)
		})
		return
	}
	// K in parts, each a partial product, then their sum (with the
	// residual, for MatMulAdd).
	part, ok := p.scratch(&p.splitPart, 4*int64(splits)*int64(a.rows)*int64(m.rows))
	if !ok {
		return
	}
	p.op(bindings(m.b, c.b), bindings(part), func() error {
		return p.e.k.MatMulCoopSplit(p.seq, part, m.b, c.b, m.typ, a.rows, m.rows, m.cols, tile, splits)
	})
	reads := bindings(part)
	var rb *vk.Binding
	if r != nil {
		reads, rb = append(reads, r.b), &r.b
	}
	p.op(reads, bindings(d.b), func() error {
		return p.e.k.SplitSum(p.seq, d.b, part, rb, a.rows*m.rows, splits)
	})
}

// splitAdds says whether the product of m and a runs on matmul_coopmat
// with K in parts, whose sum adds a residual as it writes.
func (p *program) splitAdds(m, a *tensor) bool {
	k := p.e.k
	if !k.UseCoop(m.typ, a.rows, a.cols) || k.UseCoopInt8(m.typ, a.rows, a.cols) {
		return false
	}
	_, splits := k.CoopSplitFor(m.typ, a.rows, m.rows, m.cols)
	return splits > 1
}

// q8Out returns the 8-bit copy a kernel writing activation t should fill
// as it goes, or nil where products take f32 activations: without the
// integer path or weights that use it, for rows that are not whole blocks
// of 32 values, or for a batch the cooperative-matrix products take in
// f16 (their integer variant reads the 8-bit copy).
func (p *program) q8Out(t *tensor) *actCopy {
	if !p.e.q8Weights || !q8Able(t) || coopF16Takes(p.e.k, t) {
		return nil
	}
	return p.q8Copy(t)
}

// f16Out returns the f16 copy a kernel writing activation t should fill
// as it goes, and its layout (kernels.CoopXBlocked: the rows of the
// blocked layout, 0 for row after row), or nil where no
// cooperative-matrix product reads t in f16, or the kernels cannot write
// it (rows of whole 16-value blocks at a vec4 offset). A product whose
// kernel reads the other layout rounds t itself (productCoop).
func (p *program) f16Out(t *tensor) (*actCopy, int) {
	if !f16Able(p.e.k, t) {
		return nil, 0
	}
	blocked := p.e.k.CoopXBlocked(t.rows, t.cols)
	return p.f16Copy(t, blocked != 0), blocked
}

// f16Able says whether kernels writing activation t write its f16 copy
// for the cooperative-matrix products too (program.f16Out).
func f16Able(k *kernels.Kernels, t *tensor) bool {
	return coopF16Takes(k, t) && t.cols%16 == 0 && t.b.Off%16 == 0
}

// coopF16Takes says whether the cooperative-matrix products take
// activation t in f16, so that no product reads an 8-bit copy of it.
func coopF16Takes(k *kernels.Kernels, t *tensor) bool {
	return k.CoopTakes(t.rows, t.cols) && !k.CoopInt8Takes(t.rows, t.cols)
}

// q8Able says whether kernels can write activation t in the q8 layout as
// they write it: rows of whole 32-value blocks, at a vec4 offset.
func q8Able(t *tensor) bool { return t.cols%32 == 0 && t.b.Off%16 == 0 }

// productQ8 records dst = w·x (+ r where r is not nil, in decode) on the
// 8-bit copy of x, rounding x first unless a kernel since its last write
// already did (the norm before the q, k and v projections writes it, and
// the first of those products otherwise rounds it for all three).
// With out (a residual product holding a norm's fold) it writes the
// fold's copy and sums as well, which lie in also; on a folded norm's
// output it scales by its 1/rms.
func (p *program) productQ8(d, m, a, r *tensor, out *kernels.NormOut, also ...vk.Binding) {
	c := p.q8Copy(a)
	if c == nil {
		return
	}
	in := p.normIn(a)
	if in == nil {
		p.refresh(c, a, p.e.k.QuantizeQ8)
	} else if !p.e.k.MatVecTakes(a.rows) {
		// normHold.takes folds only before matrix-vector products.
		p.fail(fmt.Errorf("internal: a tiled product of a folded norm's %dx%d output", a.rows, a.cols))
		return
	}
	reads := bindings(m.b, c.b)
	var res *vk.Binding
	if r != nil {
		reads, res = append(reads, r.b), &r.b
	}
	if in != nil {
		reads = append(reads, in.Parts)
	}
	if out != nil {
		reads = append(reads, out.W)
	}
	p.op(reads, append(bindings(d.b), also...), func() error {
		if !p.e.k.MatVecTakes(a.rows) { // never with a residual: MatMulAdd adds it apart
			return p.e.k.MatMulQ8(p.seq, d.b, m.b, c.b, m.typ, a.rows, m.rows, m.cols, p.e.k.TileQ8For(a.rows))
		}
		return p.e.k.MatVecQ8Norm(p.seq, d.b, m.b, c.b, res, m.typ, a.rows, m.rows, m.cols, p.e.k.MatVecQ8For(m.rows, m.cols), out, in)
	})
}

func (p *program) AddBias(x, b backend.Tensor) {
	t, c := act(x), act(b)
	if p.fz.bias(t, c) {
		return
	}
	p.flush()
	p.op(bindings(t.b, c.b), bindings(t.b), func() error {
		return p.e.k.AddBias(p.seq, t.b, t.b, c.b, t.rows, t.cols)
	})
}

func (p *program) Add(dst, a, b backend.Tensor) {
	p.flush()
	d, x, y := act(dst), act(a), act(b)
	p.op(bindings(x.b, y.b), bindings(d.b), func() error {
		return p.e.k.Add(p.seq, d.b, x.b, y.b, d.rows*d.cols)
	})
}

func (p *program) RoPE(x backend.Tensor, r backend.RoPE) {
	t := act(x)
	if p.fz.headRope(t, r) || p.fz.rope(t, r) {
		return
	}
	p.flush()
	p.rope(t, r)
}

// rope records the rotation of t in place on its own.
func (p *program) rope(t *tensor, r backend.RoPE) {
	kr, reads := kernelRoPE(r)
	p.op(append(reads, t.b, whole(p.step)), bindings(t.b), func() error {
		if p.rows {
			return p.e.k.RopeRows(p.seq, t.b, t.b, whole(p.step), t.rows, r.Heads, kr)
		}
		return p.e.k.Rope(p.seq, t.b, t.b, whole(p.step), t.rows, r.Heads, kr)
	})
}

// kernelRoPE converts r for the kernels, with the bindings it reads.
func kernelRoPE(r backend.RoPE) (kernels.RoPE, []vk.Binding) {
	kr := kernels.RoPE{HeadDim: r.HeadDim, Dims: r.Dims, Base: r.Base, Scale: r.Scale, NeoX: r.NeoX}
	if r.Factors == nil {
		return kr, nil
	}
	f := act(r.Factors).b
	kr.Factors = &f
	return kr, bindings(f)
}

// StoreKV rotates k (when rope is set) as it stores it: k stays unrotated.
func (p *program) StoreKV(layer int, k, v backend.Tensor, rope *backend.RoPE) {
	c := p.e.cache
	if layer < 0 || layer >= c.Layers {
		p.fail(fmt.Errorf("store_kv: layer %d of %d", layer, c.Layers))
		return
	}
	if p.fz.headStore(layer, act(k), act(v), rope) || p.fz.storeKV(layer, act(k), act(v), rope) {
		return
	}
	p.flush()
	var kr *kernels.RoPE
	var ropeReads []vk.Binding
	if rope != nil {
		r, reads := kernelRoPE(*rope)
		kr, ropeReads = &r, reads
	}
	for _, kv := range []struct {
		cache *vk.Buffer
		src   vk.Binding
		rope  *kernels.RoPE
		reads []vk.Binding
	}{{p.e.kc[layer], act(k).b, kr, ropeReads}, {p.e.vc[layer], act(v).b, nil, nil}} {
		p.op(append(kv.reads, kv.src, whole(p.step)), bindings(whole(kv.cache)), func() error {
			if p.rows {
				return p.e.k.StoreKVRows(p.seq, whole(kv.cache), kv.src, whole(p.step), p.n, c.KVDim, c.Slots(layer), c.Sequences(), kv.rope)
			}
			return p.e.k.StoreKV(p.seq, whole(kv.cache), kv.src, whole(p.step), p.n, c.KVDim, c.Slots(layer), kv.rope)
		})
	}
}

func (p *program) Attend(dst, q backend.Tensor, layer int, a backend.Attention) {
	p.flush()
	c := p.e.cache
	if layer < 0 || layer >= c.Layers {
		p.fail(fmt.Errorf("attention: layer %d of %d", layer, c.Layers))
		return
	}
	// A sliding layer's cache is a ring of Slots(layer) positions, which
	// the kernels address as StoreKV wrote it: position k in row k mod
	// slots (a global layer's slots are the context, where k mod slots is k).
	if err := c.CheckWindow(layer, c.PerSeq(p.n, p.rows), a.Window); err != nil {
		p.fail(fmt.Errorf("attention: %w", err))
		return
	}
	slots := c.Slots(layer)
	out, in := act(dst).b, act(q).b
	kc, vc := whole(p.e.kc[layer]), whole(p.e.vc[layer])
	reads := bindings(in, kc, vc, whole(p.step))
	if p.e.plainAttention(a) {
		p.op(reads, bindings(out), func() error {
			ka := kernels.Attn{Heads: a.Heads, KVHeads: a.KVHeads, HeadDim: a.HeadDim, Ctx: slots, Window: a.Window, Scale: a.Scale}
			if p.rows {
				return p.e.k.AttentionRows(p.seq, out, in, kc, vc, whole(p.step), p.n, c.Sequences(), ka)
			}
			return p.e.k.Attention(p.seq, out, in, kc, vc, whole(p.step), p.n, ka)
		})
		return
	}
	sh := flashattn.Shape{Queries: p.n, Heads: a.Heads, KVHeads: a.KVHeads, HeadDim: a.HeadDim, Context: slots, Window: a.Window, Scale: a.Scale}
	if p.rows {
		sh.Rows, sh.Seqs = true, c.Sequences()
	}
	io := flashattn.IO{Q: in, K: kc, V: vc, Out: out, Step: whole(p.step)}
	fa, err := p.e.flashFor(sh)
	if err != nil {
		p.fail(err)
		return
	}
	size, err := fa.ScratchBytes(sh)
	if err != nil {
		p.fail(err)
		return
	}
	writes := bindings(out)
	if size > 0 {
		// Every layer's split-k partials share one buffer, written and read
		// (by the reduce pass) inside Record: listed as written, the next
		// layer's use waits for this one's.
		var ok bool
		if io.Scratch, ok = p.scratch(&p.faScratch, size); !ok {
			return
		}
		writes = append(writes, io.Scratch)
	}
	// Decode: the reduce pass also rounds the output for the output
	// projection.
	var q8 *actCopy
	if fa.WritesQ8(sh) {
		if q8 = p.q8Out(act(dst)); q8 != nil {
			io.Q8 = q8.b
			writes = append(writes, q8.b)
		}
	}
	p.op(reads, writes, func() error { return fa.Record(p.seq, io, sh) })
	if q8 != nil {
		q8.fresh = true
	}
}

func (p *program) SwiGLU(dst, gate, up backend.Tensor) { p.gated(kernels.SwiGLU, dst, gate, up) }

// gated records dst = act(gate) * up, the gated FFN activation g.
func (p *program) gated(g kernels.GLU, dst, gate, up backend.Tensor) {
	d, a, u := act(dst), act(gate), act(up)
	if p.fz.gatedExperts(g, d, a, u) {
		return
	}
	if p.fz.gated(g, d, a, u, p.q8Out(d) != nil) {
		return
	}
	p.flush()
	if c, blocked := p.f16Out(d); c != nil && a.b.Off%16 == 0 && u.b.Off%16 == 0 && a.rows == d.rows && u.rows == d.rows {
		// The result feeds the down projection on the matrix units, in f16.
		p.op(bindings(a.b, u.b), bindings(d.b, c.b), func() error {
			return p.e.k.GatedF16(p.seq, g, c.b, d.b, a.b, u.b, d.rows, d.cols, blocked)
		})
		c.fresh = true
		return
	}
	if c := p.q8Out(d); c != nil && q8Able(a) && q8Able(u) {
		// The result feeds the down projection, in 8 bits.
		p.op(bindings(a.b, u.b), bindings(d.b, c.b), func() error {
			return p.e.k.GatedQ8(p.seq, g, c.b, d.b, a.b, u.b, d.rows, d.cols)
		})
		c.fresh = true
		return
	}
	p.op(bindings(a.b, u.b), bindings(d.b), func() error {
		return p.e.k.Gated(p.seq, g, d.b, a.b, u.b, d.rows*d.cols)
	})
}

// HeadNorm is kernels.HeadNorm: the norm kernel over the (rows*heads) x
// headDim view of x.
func (p *program) HeadNorm(x, w backend.Tensor, headDim int, eps float32) {
	t, g := act(x), act(w)
	if err := checkHeadNorm(t, g, headDim); err != nil {
		p.flush()
		p.fail(err)
		return
	}
	if p.fz.headNorm(t, g, headDim, eps) {
		return
	}
	p.flush()
	if !p.fz.startHeads(t, g, headDim, eps) {
		p.headNorm(t, g, headDim, eps)
	}
}

// headNorm records HeadNorm of t on its own.
func (p *program) headNorm(t, g *tensor, headDim int, eps float32) {
	p.op(bindings(t.b, g.b), bindings(t.b), func() error {
		return p.e.k.HeadNorm(p.seq, t.b, g.b, t.rows, t.cols/headDim, headDim, eps)
	})
}

// recordHeads records the head-norm chain h: one dispatch where it is
// complete, else the ops it took, one by one.
func (p *program) recordHeads(h *headChain) {
	if !h.stored {
		p.headNorm(h.q, h.qw, h.headDim, h.eps)
		if h.k != nil {
			p.headNorm(h.k, h.kw, h.headDim, h.eps)
		}
		if h.rope != nil {
			p.rope(h.q, *h.rope)
		}
		return
	}
	c := p.e.cache
	hr := h.headRope()
	kc, vc := whole(p.e.kc[h.layer]), whole(p.e.vc[h.layer])
	hr.KCache, hr.VCache, hr.Step = kc, vc, whole(p.step)
	hr.Slots, hr.Seqs, hr.Rows = c.Slots(h.layer), c.Sequences(), p.rows
	_, ropeReads := kernelRoPE(*h.kRope)
	p.op(append(ropeReads, h.q.b, h.k.b, h.v.b, h.qw.b, h.kw.b, whole(p.step)), bindings(h.q.b, kc, vc), func() error {
		return p.e.k.HeadRope(p.seq, hr)
	})
}

// checkHeadNorm validates HeadNorm's shapes: rows of whole heads and an f32
// weight of one head's values.
func checkHeadNorm(x, w *tensor, headDim int) error {
	if headDim <= 0 || x.cols%headDim != 0 || w.rows*w.cols != headDim || w.typ != quant.F32 {
		return fmt.Errorf("head_norm: rows of %d values in heads of %d, weight %dx%d %s (want %d f32 values)",
			x.cols, headDim, w.rows, w.cols, w.typ, headDim)
	}
	return nil
}

func (p *program) GeGLU(dst, gate, up backend.Tensor) { p.gated(kernels.GeGLU, dst, gate, up) }

func (p *program) Scale(x backend.Tensor, s float32) {
	p.flush()
	t := act(x)
	p.op(bindings(t.b), bindings(t.b), func() error {
		return p.e.k.Scale(p.seq, t.b, t.b, t.rows*t.cols, s)
	})
}

func (p *program) CopyRows(dst, x backend.Tensor, first int) {
	p.flush()
	d, s := act(dst), act(x)
	if first < 0 || first+d.rows > s.rows || d.cols != s.cols {
		p.fail(fmt.Errorf("copy_rows: %d rows from %d of %d", d.rows, first, s.rows))
		return
	}
	src := s.b
	src.Off += 4 * int64(first) * int64(s.cols)
	src.Size = 4 * int64(d.rows) * int64(d.cols)
	p.op(bindings(src), bindings(d.b), func() error {
		return p.e.k.CopyRows(p.seq, d.b, src, d.rows, d.cols, d.cols, s.cols)
	})
}

func (p *program) Output(t backend.Tensor) {
	o := act(t)
	p.out = append(p.out, o)
	p.outLen += o.rows * o.cols
}

// finish copies the outputs into one host-visible buffer at the end of the
// sequence, so a run reads them with a memcpy and no second submission.
func (p *program) finish() error {
	p.flush()
	if p.err != nil {
		return p.err
	}
	if p.outLen > 0 {
		var err error
		if p.host, err = p.buffer(4*int64(p.outLen), true); err != nil {
			return err
		}
		p.seq.Barrier() // the outputs are written
		off := int64(0)
		for _, o := range p.out {
			size := 4 * int64(o.rows) * int64(o.cols)
			p.seq.Copy(vk.Binding{Buf: p.host, Off: off, Size: size}, vk.Binding{Buf: o.b.Buf, Off: o.b.Off, Size: size})
			off += size
		}
	}
	if err := p.seq.End(); err != nil {
		return fmt.Errorf("vulkan: %w", err)
	}
	return nil
}

func (p *program) Run(tokens []int32, pos int, out []float32) error {
	if p.rows {
		return fmt.Errorf("vulkan: a program of rows of several sequences runs with RunRows")
	}
	if len(tokens) != p.n {
		return fmt.Errorf("vulkan: program recorded for %d tokens, run with %d", p.n, len(tokens))
	}
	if c := p.e.cache; pos < 0 || pos+p.n > c.Context {
		return fmt.Errorf("vulkan: positions %d..%d outside the context of %d", pos, pos+p.n-1, c.Context)
	}
	// The step: the first position, then the sequence (the row table's
	// first pair).
	p.stepBuf = kernels.AppendRowTable(p.stepBuf[:0], []int32{0}, []int32{int32(pos)})
	return p.run(tokens, pos, out)
}

// RunRows implements backend.Program: the rows' table for a program of
// RecordRows, else the first row's position and sequence.
func (p *program) RunRows(tokens, seqs, pos []int32, out []float32) error {
	if err := p.e.cache.CheckRows(p.n, p.rows, tokens, seqs, pos); err != nil {
		return fmt.Errorf("vulkan: %w", err)
	}
	if !p.rows {
		seqs, pos = seqs[:1], pos[:1]
	}
	p.stepBuf = kernels.AppendRowTable(p.stepBuf[:0], seqs, pos)
	return p.run(tokens, int(pos[0]), out)
}

// run writes the tokens and the step (stepBuf) and runs the program; pos
// is the first row's position, for the profile.
func (p *program) run(tokens []int32, pos int, out []float32) error {
	if len(out) != p.outLen {
		return fmt.Errorf("vulkan: output buffer holds %d values, program produces %d", len(out), p.outLen)
	}
	for i, t := range tokens {
		if p.vocab > 0 && (t < 0 || int(t) >= p.vocab) {
			return fmt.Errorf("vulkan: token id %d outside the vocabulary of %d", t, p.vocab)
		}
		binary.LittleEndian.PutUint32(p.tokBuf[4*i:], uint32(t))
	}
	if err := p.tokens.Write(0, p.tokBuf); err != nil {
		return fmt.Errorf("vulkan: %w", err)
	}
	if err := p.step.Write(0, p.stepBuf); err != nil {
		return fmt.Errorf("vulkan: %w", err)
	}
	if err := p.seq.Run(); err != nil {
		return fmt.Errorf("vulkan: %w", err)
	}
	if p.e.o.Profile {
		ts := p.seq.Timings()
		p.e.account(p.n, ts)
		if p.n == 1 {
			if w := waterfall(ts, p.traffic, pos, p.n, p.e.cache.Layers); w != nil {
				p.e.lastToken = w
			}
		}
	}
	if p.host != nil {
		if err := p.host.ReadF32(0, out); err != nil {
			return fmt.Errorf("vulkan: reading outputs: %w", err)
		}
	}
	return nil
}

func (p *program) Close() {
	if p.seq != nil {
		p.seq.Free()
		p.seq = nil
	}
	for _, b := range p.owned {
		b.Free()
	}
	p.owned = nil
}

// flush records the head-norm chain, the pending fusions and the held
// expert product, in the order their ops came.
func (p *program) flush() {
	if p.hold.holding() {
		p.resolve()
	}
	if h := p.fz.takeHeads(); h != nil {
		p.recordHeads(h)
	}
	for _, fu := range p.fz.take() {
		p.recordFusion(fu)
	}
	if e := p.fz.takeExpert(); e != nil {
		p.matVecID(e)
	}
}

// recordFusion records fu: one stacked dispatch, or the plain product
// where fu is one product with nothing to finish.
func (p *program) recordFusion(fu *fusion) {
	if fu.plain() {
		p.matMul(fu.mats[0].dst, fu.mats[0].w, fu.x)
		return
	}
	var kc, vc vk.Binding
	slots := 0
	if fu.caches() {
		kc, vc, slots = whole(p.e.kc[fu.layer]), whole(p.e.vc[fu.layer]), p.e.cache.Slots(fu.layer)
	}
	st := fu.stack(p.n, slots, kc, vc)
	st.Seqs, st.Rows = p.e.cache.Sequences(), p.rows
	st.X = fu.x.b
	if fu.q8 {
		c := p.q8Copy(fu.x)
		if c == nil {
			return
		}
		if st.NormIn = p.normIn(fu.x); st.NormIn == nil {
			p.refresh(c, fu.x, p.e.k.QuantizeQ8)
		}
		st.X = c.b
	}
	reads, writes := bindings(st.X), []vk.Binding(nil)
	if st.NormIn != nil {
		reads = append(reads, st.NormIn.Parts)
	}
	for j, m := range st.Mats {
		reads = append(reads, m.W)
		if m.Bias != nil {
			reads = append(reads, *m.Bias)
		}
		if st.Gated == nil || j == 0 {
			writes = append(writes, m.Out)
		}
	}
	if st.Rope.Factors != nil {
		reads = append(reads, *st.Rope.Factors)
	}
	if fu.rope != nil || fu.caches() {
		st.Step = whole(p.step)
		reads = append(reads, st.Step)
	}
	var q8 *actCopy
	if fu.gq8 {
		if q8 = p.q8Out(fu.gdst); q8 == nil {
			p.fail(fmt.Errorf("matvec_stack: no 8-bit copy for the gated activation"))
			return
		}
		st.GatedQ8 = &q8.b
		writes = append(writes, q8.b)
	}
	p.op(reads, writes, func() error { return p.e.k.MatVecStack(p.seq, *st) })
	if q8 != nil {
		q8.fresh = true
	}
}
