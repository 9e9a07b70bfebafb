package engine

import (
	"fmt"
	"strings"

	"github.com/vkinfer/vkinfer/quant"
	"github.com/vkinfer/vkinfer/vk"
	"github.com/vkinfer/vkinfer/vk/kernels"
)

// The RMSNorm folded into its neighbours (FuseNorm, kernels.NormOut and
// NormIn, docs/KERNELS.md): a decode product that adds into the residual
// stream is held (heldAdd); an RMSNorm of its result right after is held
// with it (heldNorm); if the next op is an 8-bit matrix-vector product of
// the norm's output, the held product is recorded writing that output's
// q8 copy and block sums, and the norm is never recorded: its products
// scale by 1/rms themselves. Any other next op records both as they came.
// The output of a folded norm holds no f32 values: the products that read
// it must all take the q8 copy, which the engine ensures by folding only
// where every weight that reads a norm's output takes 8-bit activations
// (normReader), and program.op refuses any other read.

// heldAdd is a product into the residual d, held; record records it (a
// plan lists it), with out (not nil) writing the folded norm's copy and
// sums too, which then lie in writes.
type heldAdd struct {
	d      *tensor
	record func(out *kernels.NormOut, writes []vk.Binding)
}

// heldNorm is an RMSNorm d = norm(x)·w of a held product's result.
type heldNorm struct {
	add     *heldAdd
	d, x, w *tensor
	eps     float32
}

// normHold is what program and a plan's planOps hold for a fold: a
// residual product, and once the norm after it comes, the norm with it.
// The rules are here once; each holder records (or lists) what it takes.
type normHold struct {
	add  *heldAdd
	norm *heldNorm
}

// holding says whether anything is held.
func (h *normHold) holding() bool { return h.add != nil || h.norm != nil }

// holdAdd holds a residual product into d of activations a, whose kernel
// can take NormOut where folds, for a norm after it, or says it cannot
// (the caller records it): the fusion on, every norm reader in 8 bits
// (allQ8), one token's row, and a not itself a folded norm's output
// (scaledIn: the product would read the sums it writes).
func (h *normHold) holdAdd(on Fusion, allQ8, scaledIn bool, d *tensor, folds bool, record func(out *kernels.NormOut, writes []vk.Binding)) bool {
	if !folds || on&FuseNorm == 0 || !allQ8 || !foldsRows(d.rows) || d.cols%32 != 0 || scaledIn {
		return false
	}
	h.add = &heldAdd{d: d, record: record}
	return true
}

// holdNorm holds RMSNorm d = norm(x)·w with the held product that wrote x
// (held by holdAdd's rules), where the products of d read its q8 copy
// (rows of whole blocks, not the matrix units' f16), or says it cannot
// (the caller records what is held, then the norm).
func (h *normHold) holdNorm(k *kernels.Kernels, d, x, w *tensor, eps float32) bool {
	if h.add == nil || h.add.d != x || h.norm != nil || !q8Able(d) || coopF16Takes(k, d) {
		return false
	}
	h.add, h.norm = nil, &heldNorm{add: h.add, d: d, x: x, w: w, eps: eps}
	return true
}

// takes says whether a product of weights m and activations a folds the
// held norm: a reads the norm's output, in 8 bits, on a matrix-vector
// kernel, so it can take NormIn.
func (h *normHold) takes(k *kernels.Kernels, m, a *tensor) bool {
	return h.norm != nil && h.norm.d == a && k.UseQ8(m.typ) && k.MatVecTakes(a.rows)
}

// take returns what is held and forgets it: the product to record (the
// held norm's, if one is held) and the norm, either nil.
func (h *normHold) take() (*heldAdd, *heldNorm) {
	add, n := h.add, h.norm
	if n != nil {
		add = n.add
	}
	h.add, h.norm = nil, nil
	return add, n
}

// resolve records what is held as it came: the product, then the norm
// (by norm, which records or lists it).
func (h *normHold) resolve(norm func(n *heldNorm)) {
	add, n := h.take()
	if add != nil {
		add.record(nil, nil)
	}
	if n != nil {
		norm(n)
	}
}

// folded is the state of a folded norm's output: the block sums its
// products read, while no other fold has written over them.
type folded struct {
	parts vk.Binding
	eps   float32
	live  bool
}

// normReader says whether weight name is a matrix that reads the output
// of a norm with another product beside it (q, k and v; gate and up), so
// that one of them cannot take a folded norm if another does (biases are
// not products).
func normReader(name string) bool {
	for _, s := range []string{".attn_q.weight", ".attn_k.weight", ".attn_v.weight", ".attn_qkv.weight", ".ffn_gate.weight", ".ffn_up.weight",
		".ffn_gate_exps.weight", ".ffn_up_exps.weight"} {
		if strings.HasSuffix(name, s) {
			return true
		}
	}
	return false
}

// foldsRows says whether a product of n columns folds a norm: one. The
// kernels take up to MaxMatVecCols, but with 4 sequences decoding
// together the counters of every column's blocks cost more than the
// norm's dispatch (docs/KERNELS.md).
func foldsRows(n int) bool { return n == 1 }

// addFolds says whether a residual product of weights m (q8) can take
// NormOut in its built-in shape.
func addFolds(k *kernels.Kernels, m *tensor) bool {
	return k.UseQ8(m.typ) && k.NormFolds(m.rows, m.cols)
}

// resolve records what is held as it came: the product, then the norm.
func (p *program) resolve() {
	p.hold.resolve(func(n *heldNorm) { p.recordNorm(n.d, n.x, n.w, n.eps) })
}

// fold records the held product with the held norm folded into it.
func (p *program) fold() {
	_, n := p.hold.take()
	c := p.q8Out(n.d)
	if c == nil {
		return
	}
	size := kernels.NormPartsBytes(n.d.rows, n.d.cols)
	if p.normParts == nil || p.normParts.Size() < size {
		b, err := p.buffer(size, false)
		if err != nil {
			p.fail(err)
			return
		}
		p.normParts = b
	}
	parts := vk.Binding{Buf: p.normParts, Size: size}
	n.add.record(&kernels.NormOut{W: n.w.b, Q8: c.b, Parts: parts}, bindings(c.b, parts))
	c.fresh = true
	p.scaled[n.d] = &folded{parts: parts, eps: n.eps, live: true}
}

// normIn is the NormIn of a product reading a's q8 copy: nil where a is
// no folded norm's output.
func (p *program) normIn(a *tensor) *kernels.NormIn {
	f, ok := p.scaled[a]
	if !ok {
		return nil
	}
	if !f.live {
		p.fail(fmt.Errorf("internal: a folded norm's %dx%d output read after its sums were overwritten", a.rows, a.cols))
		return nil
	}
	return &kernels.NormIn{Parts: f.parts, Eps: f.eps}
}

// foldedReads fails a dispatch that reads a folded norm's output in f32,
// and tracks its writes: a write of the output ends its fold, one of the
// sums the older folds'.
func (p *program) foldedReads(reads, writes []vk.Binding) {
	for t := range p.scaled {
		for _, b := range reads {
			if b.Buf == t.b.Buf {
				p.fail(fmt.Errorf("internal: a folded norm's %dx%d output read in f32", t.rows, t.cols))
			}
		}
	}
	for t, f := range p.scaled {
		for _, b := range writes {
			if b.Buf == t.b.Buf {
				delete(p.scaled, t)
				break
			}
			if b.Buf == f.parts.Buf {
				f.live = false
			}
		}
	}
}

// normQ8 says, for the fold's rule, whether weight name of type t
// takes 8-bit activations where it reads a norm's output.
func normQ8(k *kernels.Kernels, name string, t quant.Type) bool {
	return !normReader(name) || k.UseQ8(t)
}
