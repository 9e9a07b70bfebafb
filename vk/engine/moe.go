package engine

import (
	"fmt"

	"github.com/vkinfer/vkinfer/backend"
	"github.com/vkinfer/vkinfer/quant"
	"github.com/vkinfer/vkinfer/vk"
	"github.com/vkinfer/vkinfer/vk/kernels"
)

// A mixture of experts runs as three kernels (docs/KERNELS.md): route.comp
// writes each token's expert ids and weights on the device, matvec_id.comp
// multiplies by the chosen experts' matrices only, reading the ids where
// route left them (no host round trip: the token is recorded once and
// replayed), and moe_sum.comp mixes the experts' outputs into the residual.
// A prefill batch (more than kernels.MaxMatVecCols tokens) packs its pairs
// by expert instead: moe_sort.comp sorts them and cuts each expert's run
// into tiles, still on the device, and the gathered tiled product reads
// each chosen expert once per tile rather than once per token.

// checkRoute validates Route's shapes.
func checkRoute(id, w, l *tensor, k int) error {
	if k < 1 || k > l.cols || l.cols > kernels.MaxExperts || id.rows != l.rows || w.rows != l.rows || id.cols != k || w.cols != k {
		return fmt.Errorf("route: top %d of logits %dx%d (at most %d experts) into ids %dx%d and weights %dx%d",
			k, l.rows, l.cols, kernels.MaxExperts, id.rows, id.cols, w.rows, w.cols)
	}
	return nil
}

// checkMatMulID validates MatMulID's shapes against the experts Route
// chose among (0: ids that no Route wrote) and returns them.
func checkMatMulID(d, m, a, id *tensor, experts int) error {
	if d.cols == 0 || experts == 0 || m.rows != experts*d.cols || d.rows != id.rows*id.cols || a.cols != m.cols || (a.rows != id.rows && a.rows != d.rows) {
		return fmt.Errorf("mul_mat_id: experts %dx%d, x %dx%d, ids %dx%d routing among %d experts (0: not written by Route), dst %dx%d",
			m.rows, m.cols, a.rows, a.cols, id.rows, id.cols, experts, d.rows, d.cols)
	}
	return nil
}

// checkMoESum validates MoESum's shapes.
func checkMoESum(d, y, w, r *tensor) error {
	if r.rows != d.rows || r.cols != d.cols || w.rows != d.rows || y.rows != d.rows*w.cols || y.cols != d.cols {
		return fmt.Errorf("moe_sum: dst %dx%d, experts' outputs %dx%d, weights %dx%d, residual %dx%d",
			d.rows, d.cols, y.rows, y.cols, w.rows, w.cols, r.rows, r.cols)
	}
	return nil
}

func (p *program) Route(ids, weights, logits, router, x backend.Tensor, k int, norm bool) {
	id, w, l, m, a := act(ids), act(weights), act(logits), act(router), act(x)
	fused := p.fz.routerFused(l, m, a)
	if !fused {
		p.MatMul(logits, router, x)
	}
	p.flush()
	if err := checkRoute(id, w, l, k); err != nil {
		p.fail(err)
		return
	}
	p.routed[id] = l.cols
	if !fused {
		p.op(bindings(l.b), bindings(id.b, w.b), func() error {
			return p.e.k.Route(p.seq, id.b, w.b, l.b, l.rows, l.cols, k, norm)
		})
		return
	}
	// Straight after the norm that made x, the router reads what the norm
	// reads and runs beside it.
	src, reads, rn := a, bindings(m.b, a.b), (*kernels.RouterNorm)(nil)
	if n := p.norm; n.feeds(a) {
		src, reads, rn = n.x, bindings(m.b, n.x.b, n.w.b), &kernels.RouterNorm{G: n.w.b, Eps: n.eps}
	}
	if a.rows < kernels.RouterPartsMinRows {
		p.op(reads, bindings(l.b, id.b, w.b), func() error {
			return p.e.k.Router(p.seq, id.b, w.b, l.b, m.b, src.b, rn, a.rows, l.cols, a.cols, k, norm)
		})
		return
	}
	// A prefill batch: the product in parts of K, tiles of tokens and
	// experts reading the router matrix once a tile, then the parts summed
	// and routed.
	parts, ok := p.scratch(&p.routerParts, p.e.k.RouterPartsBytes(a.rows, l.cols, a.cols))
	if !ok {
		return
	}
	var g *vk.Binding
	if rn != nil {
		g = &rn.G
	}
	p.op(reads, bindings(parts), func() error {
		return p.e.k.RouterParts(p.seq, parts, m.b, src.b, g, a.rows, l.cols, a.cols)
	})
	p.op(bindings(parts, src.b), bindings(l.b, id.b, w.b), func() error {
		return p.e.k.RouteParts(p.seq, id.b, w.b, l.b, parts, src.b, rn, a.rows, l.cols, a.cols, k, norm)
	})
}

func (p *program) MatMulID(dst, w, x, ids backend.Tensor) {
	d, m, a, id := act(dst), act(w), act(x), act(ids)
	experts := p.routed[id]
	if err := checkMatMulID(d, m, a, id, experts); err != nil {
		p.flush()
		p.fail(err)
		return
	}
	if p.fz.holdExpert(d, m, a, id, experts) {
		return
	}
	p.flush()
	if id.rows > kernels.MaxMatVecCols {
		p.productID(d, m, a, id, experts, chosen(d, m, experts))
		return
	}
	if p.fz.holdExpert(d, m, a, id, experts) {
		return
	}
	p.matVecID(&expertProduct{d: d, m: m, a: a, id: id, experts: experts})
}

// expertX returns the activations a fused expert product of weights of
// type t reads: a in 8 bits where the device takes them for t (the copy
// the kernel that wrote a filled as it went, or rounded here), else a.
func (p *program) expertX(a *tensor, t quant.Type) (vk.Binding, bool) {
	if _, ok := p.scaled[a]; ok {
		// Never folded before an expert product (takesFold).
		p.fail(fmt.Errorf("internal: an expert product of a folded norm's output"))
		return vk.Binding{}, false
	}
	if !p.e.k.UseQ8(t) || !q8Able(a) {
		return a.b, false
	}
	c := p.q8Copy(a)
	if c == nil {
		return vk.Binding{}, false
	}
	p.refresh(c, a, p.e.k.QuantizeQ8)
	return c.b, true
}

// gluQ8Out says whether the fused gate and up product of e (x in 8 bits
// or not) can write its output's q8 copy: whole blocks of 32 values, and
// half the shape's rows dividing 32 (kernels.MatVecIDGLU).
func gluQ8Out(k *kernels.Kernels, e *expertProduct, q8 bool) bool {
	sh := k.IDGLUShape(q8, e.d.cols, e.m.cols, e.id.cols)
	return e.d.cols%32 == 0 && 32%(sh.Rows/2) == 0
}

// chosen is the range of the experts m that a product into d's slots
// reads, at most one expert per slot: what the profile's waterfall
// counts, not the whole stack the binding spans.
func chosen(d, m *tensor, experts int) vk.Binding {
	c := m.b
	if rb, err := m.typ.RowBytes(m.cols); err == nil {
		c.Size = int64(min(d.rows, experts)) * int64(d.cols) * int64(rb)
	}
	return c
}

// matVecID records a held decode expert product: with its joined up
// product and their gated activation in one dispatch, or each product on
// its own.
func (p *program) matVecID(e *expertProduct) {
	d, m, a, id := e.d, e.m, e.a, e.id
	if u := e.up; u != nil && e.glu != nil {
		// x in 8 bits where the weights take them: the copy ffn_norm
		// wrote as it went, or rounded here.
		x, q8 := p.expertX(a, m.typ)
		if p.err != nil {
			return
		}
		// And the output's 8-bit copy for the down product, where the
		// kernel can write it.
		writes := bindings(e.gdst.b)
		var out *actCopy
		var q8Out *vk.Binding
		if gluQ8Out(p.e.k, e, q8) {
			if out = p.q8Out(e.gdst); out != nil {
				q8Out = &out.b
				writes = append(writes, out.b)
			}
		}
		p.op(bindings(chosen(d, m, e.experts), chosen(u.d, u.m, e.experts), x, id.b), writes, func() error {
			return p.e.k.MatVecIDGLU(p.seq, *e.glu, e.gdst.b, m.b, u.m.b, x, id.b, q8Out, m.typ, d.rows, id.cols, a.rows, e.experts, d.cols, m.cols, q8)
		})
		if out != nil {
			out.fresh = true
		}
		return
	}
	p.op(bindings(chosen(d, m, e.experts), a.b, id.b), bindings(d.b), func() error {
		return p.e.k.MatVecID(p.seq, d.b, m.b, a.b, id.b, m.typ, d.rows, id.cols, a.rows, e.experts, d.cols, m.cols)
	})
	if e.up != nil {
		p.matVecID(e.up)
	}
}

// productID records a prefill batch's expert product packed by expert on
// the kernel the batch's dense products use (matMul's choice): the pairs
// sorted into tiles of the product's height (sorted), then the gathered
// product on x as it is or on its f16 or 8-bit copy, each result in its
// pair's row as matvec_id writes it. chosen is the weight range the
// profile counts.
func (p *program) productID(d, m, a, id *tensor, experts int, chosen vk.Binding) {
	k := p.e.k
	s := kernels.Sorted{Pairs: d.rows, TopK: id.cols, Experts: experts}
	switch {
	case k.UseCoop(m.typ, a.rows, a.cols):
		tile := k.MoECoopTile(m.typ)
		c := p.f16Copy(a, false)
		if c == nil || !p.sorted(&s, id, tile.BN) {
			return
		}
		p.refresh(c, a, k.QuantizeF16)
		p.op(bindings(chosen, c.b, s.B), bindings(d.b), func() error {
			return k.MatMulCoopID(p.seq, d.b, m.b, c.b, s, m.typ, a.rows, d.cols, m.cols, tile)
		})
	case k.UseQ8(m.typ):
		tile := k.MoETileQ8(s.Pairs, experts)
		c := p.q8Copy(a)
		if c == nil || !p.sorted(&s, id, tile.BN) {
			return
		}
		p.refresh(c, a, k.QuantizeQ8)
		p.op(bindings(chosen, c.b, s.B), bindings(d.b), func() error {
			return k.MatMulQ8ID(p.seq, d.b, m.b, c.b, s, m.typ, a.rows, d.cols, m.cols, tile)
		})
	default:
		tile := k.TileFor(m.typ)
		if !p.sorted(&s, id, tile.BN) {
			return
		}
		p.op(bindings(chosen, a.b, s.B), bindings(d.b), func() error {
			return k.MatMulTiledID(p.seq, d.b, m.b, a.b, s, m.typ, a.rows, d.cols, m.cols, tile)
		})
	}
}

// sortKey names one sort of a batch's pairs: the ids Route wrote, the
// experts it routed among and the tiles' height.
type sortKey struct {
	ids         vk.Binding
	experts, bn int
}

// sorted sets s.B and s.Height to the pairs of id sorted by expert and cut
// into tiles of bn (moe_sort), recording the sort unless it was since
// Route last wrote id: a layer's gate, up and down products share one.
// False (the error kept for Record) if its buffer cannot be allocated.
func (p *program) sorted(s *kernels.Sorted, id *tensor, bn int) bool {
	key := sortKey{id.b, s.Experts, bn}
	c := p.sorts[key]
	if c == nil {
		b, err := p.buffer(4*int64(kernels.MoESortWords(s.Pairs, s.Experts, bn)), false)
		if err != nil {
			p.fail(err)
			return false
		}
		c = &actCopy{b: whole(b)}
		p.sorts[key] = c
	}
	s.B, s.Height = c.b, bn
	if !c.fresh {
		p.op(bindings(id.b), bindings(c.b), func() error {
			return p.e.k.MoESort(p.seq, c.b, id.b, s.Pairs, s.Experts, bn)
		})
		c.fresh = true
	}
	return true
}

func (p *program) MoESum(dst, y, weights, r backend.Tensor) {
	d, ys, w, res := act(dst), act(y), act(weights), act(r)
	if err := checkMoESum(d, ys, w, res); err != nil {
		p.flush()
		p.fail(err)
		return
	}
	if e := p.fz.sumExperts(d, ys, w, res); e != nil {
		m, a, id := e.m, e.a, e.id
		x, q8 := p.expertX(a, m.typ)
		if p.err != nil {
			return
		}
		p.op(bindings(chosen(e.d, m, e.experts), x, id.b, w.b, res.b), bindings(d.b), func() error {
			return p.e.k.MatVecIDSum(p.seq, d.b, m.b, x, id.b, w.b, res.b, m.typ, id.rows, id.cols, a.rows, e.experts, d.cols, m.cols, q8)
		})
		return
	}
	p.flush()
	p.op(bindings(ys.b, w.b, res.b), bindings(d.b), func() error {
		return p.e.k.MoESum(p.seq, d.b, ys.b, w.b, res.b, d.rows, d.cols, w.cols)
	})
}

func (o *planOps) Route(ids, weights, logits, router, x backend.Tensor, k int, norm bool) {
	id, w, l, m, a := act(ids), act(weights), act(logits), act(router), act(x)
	fused := o.fz.routerFused(l, m, a)
	if !fused {
		o.MatMul(logits, router, x)
	}
	o.flush()
	if err := checkRoute(id, w, l, k); err != nil {
		o.fail(err)
		return
	}
	o.routed[id] = l.cols
	switch rms := o.norm.feeds(a); {
	case fused && a.rows >= kernels.RouterPartsMinRows:
		o.add(fmt.Sprintf("router_parts %dx%d F32", l.cols, a.cols), 0, o.pl.e.k.RouterPartsSpec(rms))
		o.add(fmt.Sprintf("route top %d of %d, parts", k, l.cols), 0, o.pl.e.k.RoutePartsSpec(norm, rms, l.cols))
	case fused:
		o.add(fmt.Sprintf("router %dx%d F32, top %d", l.cols, a.cols, k), 0, o.pl.e.k.RouterSpec(norm, rms, a.rows, l.cols))
	default:
		o.add(fmt.Sprintf("route top %d of %d", k, l.cols), 0, o.pl.e.k.RouteSpec(norm, l.cols))
	}
	o.wrote(l)
	o.wrote(id)
	o.wrote(w)
}

func (o *planOps) MatMulID(dst, w, x, ids backend.Tensor) {
	d, m, a, id := act(dst), act(w), act(x), act(ids)
	if err := checkMatMulID(d, m, a, id, o.routed[id]); err != nil {
		o.flush()
		o.fail(err)
		return
	}
	k, experts := o.pl.e.k, o.routed[id]
	if o.fz.holdExpert(d, m, a, id, experts) {
		return
	}
	o.flush()
	if id.rows <= kernels.MaxMatVecCols {
		if !o.fz.holdExpert(d, m, a, id, experts) {
			o.matVecID(&expertProduct{d: d, m: m, a: a, id: id, experts: experts})
		}
		return
	}
	o.add(fmt.Sprintf("moe_sort %d experts", experts), 0, k.MoESortSpec())
	what := fmt.Sprintf("%d experts of %dx%d %s", experts, d.cols, m.cols, m.typ)
	switch {
	case k.UseCoop(m.typ, a.rows, a.cols):
		o.f16Round(a, false)
		tile := k.MoECoopTile(m.typ)
		o.add(fmt.Sprintf("matmul_coopmat_id %s %s", what, tile), 0, k.MatMulCoopIDSpec(m.typ, tile))
	case k.UseQ8(m.typ):
		if !o.q8[a] {
			o.add(fmt.Sprintf("quantize_q8 %d", a.cols), 0, k.QuantizeQ8Spec())
			o.q8[a] = true
		}
		tile := k.MoETileQ8(d.rows, experts)
		o.add(fmt.Sprintf("matmul_q8_id %s %s", what, tile), 0, k.MatMulQ8IDSpec(m.typ, tile))
	default:
		tile := k.TileFor(m.typ)
		o.add(fmt.Sprintf("matmul_id %s %s", what, tile), 0, k.MatMulIDSpec(m.typ, tile))
	}
	o.wrote(d)
}

// expertX is program.expertX: whether the fused expert product of weights
// of type t reads a in 8 bits, listing the rounding where no kernel wrote
// the copy since a's last write.
func (o *planOps) expertX(a *tensor, t quant.Type) bool {
	k := o.pl.e.k
	if !k.UseQ8(t) || !q8Able(a) {
		return false
	}
	if !o.q8[a] {
		o.add(fmt.Sprintf("quantize_q8 %d", a.cols), 0, k.QuantizeQ8Spec())
		o.q8[a] = true
	}
	return true
}

// matVecID is program.matVecID.
func (o *planOps) matVecID(e *expertProduct) {
	k := o.pl.e.k
	if e.up != nil && e.glu != nil {
		q8 := o.expertX(e.a, e.m.typ)
		name := "matvec_id_glu"
		if q8 {
			name += "_q8"
		}
		sh := k.IDGLUShape(q8, e.d.cols, e.m.cols, e.id.cols)
		o.wrote(e.gdst)
		q8Out := gluQ8Out(k, e, q8) && o.q8Out(e.gdst)
		op := fmt.Sprintf("%s %d experts of %dx%d %s %s %s", name, e.experts, e.d.cols, e.m.cols, e.m.typ, *e.glu, sh)
		if q8Out {
			op += " +q8"
			o.q8[e.gdst] = true
		}
		o.add(op, 0, k.MatVecIDGLUSpec(e.m.typ, *e.glu, sh, q8, q8Out))
		return
	}
	o.add(fmt.Sprintf("matvec_id %d experts of %dx%d %s %s", e.experts, e.d.cols, e.m.cols, e.m.typ, k.MatVec), 0, k.MatVecIDSpec(e.m.typ, k.MatVec))
	o.wrote(e.d)
	if e.up != nil {
		o.matVecID(e.up)
	}
}

func (o *planOps) MoESum(dst, y, weights, r backend.Tensor) {
	d := act(dst)
	if err := checkMoESum(d, act(y), act(weights), act(r)); err != nil {
		o.flush()
		o.fail(err)
		return
	}
	if e := o.fz.sumExperts(d, act(y), act(weights), act(r)); e != nil {
		k := o.pl.e.k
		q8 := o.expertX(e.a, e.m.typ)
		name := "matvec_id_sum"
		if q8 {
			name += "_q8"
		}
		sh := k.IDSumShape(e.m.typ, q8, d.cols, e.m.cols, e.id.cols)
		o.add(fmt.Sprintf("%s %d experts of %dx%d %s %s", name, e.experts, d.cols, e.m.cols, e.m.typ, sh), 0, k.MatVecIDSumSpec(e.m.typ, sh, q8))
		o.wrote(d)
		return
	}
	o.flush()
	o.add(fmt.Sprintf("moe_sum %d", d.cols), 0, o.pl.e.k.MoESumSpec())
	o.wrote(d)
}
