package engine

import (
	"fmt"
	"strings"

	"github.com/vkinfer/vkinfer/backend"
	"github.com/vkinfer/vkinfer/quant"
	"github.com/vkinfer/vkinfer/vk"
	"github.com/vkinfer/vkinfer/vk/kernels"
)

// Fusion names decode fusions (docs/KERNELS.md, "decode fusions") that
// Options.Unfuse turns off, so that each can be measured against the
// unfused ops.
type Fusion uint8

const (
	// FuseStack: matrix-vector products of one activation with weights of
	// one type (q, k and v; gate and up) in one dispatch
	// (kernels.MatVecStack).
	FuseStack Fusion = 1 << iota
	// FuseRoPE: biases, RoPE and the KV-cache stores in that dispatch's
	// epilogue instead of dispatches of their own (needs FuseStack).
	FuseRoPE
	// FuseGLU: the gated activation of gate and up, with its 8-bit copy,
	// in their stacked dispatch (needs FuseStack).
	FuseGLU
	// FuseMoE: a mixture of experts' down product and the mix of its
	// slots into the residual in one dispatch (kernels.MatVecIDSum)
	// instead of matvec_id and moe_sum.
	FuseMoE
	// FuseMoEGLU: a mixture of experts' gate and up products and their
	// gated activation in one dispatch (kernels.MatVecIDGLU) instead of
	// two matvec_id and the activation's.
	FuseMoEGLU
	// FuseRouter: a mixture of experts' router product and its top-k in
	// one dispatch (kernels.Router) instead of a product and route.comp,
	// and beside the norm before it rather than after it: the kernel
	// normalises the residual itself.
	FuseRouter
	// FuseHeads: the head norms of q and k, the rotation of q and the
	// stores of k and v (Qwen3, Gemma 3) in one dispatch
	// (kernels.HeadRope) instead of five.
	FuseHeads
	// FuseNorm: an RMSNorm of the residual stream folded into the product
	// that writes the residual and the products that read the norm
	// (kernels.NormOut, NormIn) instead of a dispatch of its own.
	FuseNorm

	// fuseAll is every fusion, the default.
	fuseAll = FuseStack | FuseRoPE | FuseGLU | FuseMoE | FuseMoEGLU | FuseRouter | FuseHeads | FuseNorm
)

var fusionNames = []struct {
	f    Fusion
	name string
}{{FuseStack, "stack"}, {FuseRoPE, "rope"}, {FuseGLU, "glu"}, {FuseMoE, "moe"}, {FuseMoEGLU, "moeglu"}, {FuseRouter, "router"}, {FuseHeads, "heads"},
	{FuseNorm, "norm"}}

// ParseFusions reads a comma-separated list of fusion names (stack, rope,
// glu, moe, moeglu, router, heads, norm; "all" for every one; "" for none).
func ParseFusions(s string) (Fusion, error) {
	var f Fusion
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if name == "all" {
			f |= fuseAll
			continue
		}
		found := false
		for _, n := range fusionNames {
			if n.name == name {
				f, found = f|n.f, true
			}
		}
		if !found {
			return 0, fmt.Errorf("vulkan: unknown fusion %q (want stack, rope, glu, moe, moeglu, router, heads, norm or all)", name)
		}
	}
	return f, nil
}

func (f Fusion) String() string {
	var names []string
	for _, n := range fusionNames {
		if f&n.f != 0 {
			names = append(names, n.name)
		}
	}
	return strings.Join(names, ",")
}

// fusion is a stacked product being gathered: products of activation x
// with weights of one type, and what the ops after them (biases, RoPE, the
// KV stores, the gated activation) asked of their results. Ops are
// recorded in order, so a fusion only takes what follows its products
// directly; any other op records the pending fusions first (flush).
type fusion struct {
	x     *tensor
	q8    bool // x in 8 bits (kernels.UseQ8 of the weights)
	mats  []fusedMat
	rope  *backend.RoPE // the rotation of the mats with rope
	layer int           // the cache layer of the mats with cache
	gated *kernels.GLU  // mats are gate and up, dst gets act(gate)*up
	gdst  *tensor       // the gated activation's destination
	gq8   bool          // and its 8-bit copy
}

type fusedMat struct {
	w, dst, bias *tensor
	rope         bool
	cache        int // 0, or where the rows go instead of dst: cacheK or cacheV
}

const (
	cacheK = 1 + iota
	cacheV
)

// fuser gathers decode's fusions; program and planOps share it, so that
// a plan decides as the engine does.
type fuser struct {
	k       *kernels.Kernels
	on      Fusion
	n       int
	pending []*fusion
	// sameBuffer says whether two weights lie in one buffer (program:
	// the arena keeps a layer's weights together, see Engine.Weight; a
	// plan has no buffers and assumes so).
	sameBuffer func(a, b *tensor) bool
	// expert is a decode expert product held for the op after it (FuseMoE),
	// nil when none is.
	expert *expertProduct
	// heads is a head-norm chain being gathered (FuseHeads), nil when
	// none is. It starts after a flush, so whatever is pending came after
	// it, and a flush records it first.
	heads *headChain
}

// headChain is what a layer with head norms does between its q, k and v
// products and attention, gathered op by op: HeadNorm of q, HeadNorm of k,
// RoPE of q, StoreKV of k (rotated) and v. Complete (stored), it is one
// kernels.HeadRope dispatch; cut short by another op, its ops are recorded
// one by one.
type headChain struct {
	q, qw, k, kw *tensor
	headDim      int
	eps          float32
	rope         *backend.RoPE // q's rotation, once taken
	v            *tensor       // with stored: the store of k and v
	kRope        *backend.RoPE
	layer        int
	stored       bool
}

// startHeads takes HeadNorm of x (a layer's q) as the start of a chain, or
// says it cannot. The caller has flushed.
func (f *fuser) startHeads(x, w *tensor, headDim int, eps float32) bool {
	// Rows go along the grid's y.
	if f.on&FuseHeads == 0 || x.cols%headDim != 0 || x.rows > kernels.GridLimit {
		return false
	}
	f.heads = &headChain{q: x, qw: w, headDim: headDim, eps: eps}
	return true
}

// headNorm takes HeadNorm of x as the chain's second norm (k's).
func (f *fuser) headNorm(x, w *tensor, headDim int, eps float32) bool {
	h := f.heads
	if h == nil || h.k != nil || x == h.q || headDim != h.headDim || eps != h.eps || x.rows != h.q.rows || x.cols%headDim != 0 {
		return false
	}
	h.k, h.kw = x, w
	return true
}

// headRope takes the rotation of the chain's q.
func (f *fuser) headRope(x *tensor, r backend.RoPE) bool {
	h := f.heads
	if h == nil || h.k == nil || h.rope != nil || x != h.q || r.HeadDim != h.headDim || r.Heads*h.headDim != x.cols {
		return false
	}
	h.rope = &r
	return true
}

// headStore takes the store of the chain's k, rotated as its q, and of v
// into layer's cache, which completes the chain.
func (f *fuser) headStore(layer int, k, v *tensor, r *backend.RoPE) bool {
	h := f.heads
	if h == nil || h.rope == nil || h.stored || k != h.k || r == nil || v.rows != k.rows || v.cols != k.cols ||
		r.Heads*h.headDim != k.cols {
		return false
	}
	q := *h.rope
	if q.HeadDim != r.HeadDim || q.Dims != r.Dims || q.NeoX != r.NeoX || q.Base != r.Base || q.Scale != r.Scale || q.Factors != r.Factors {
		return false
	}
	h.v, h.kRope, h.layer, h.stored = v, r, layer, true
	return true
}

// takeHeads returns the chain, if any, and forgets it.
func (f *fuser) takeHeads() *headChain {
	h := f.heads
	f.heads = nil
	return h
}

// headRope is the complete chain h as a kernels.HeadRope of n rows, with
// the tensors' bindings (a plan's are zero); the caller fills the caches,
// Step, Slots, Seqs, Rows and Rope.Factors.
func (h *headChain) headRope() kernels.HeadRope {
	r, _ := kernelRoPE(*h.kRope)
	return kernels.HeadRope{Q: h.q.b, K: h.k.b, V: h.v.b, QNorm: h.qw.b, KNorm: h.kw.b, N: h.q.rows,
		Heads: h.q.cols / h.headDim, KVHeads: h.k.cols / h.headDim, Rope: r, Eps: h.eps}
}

// expertProduct is a decode MatMulID, d = m_ids · a: held until an op
// that does not take it records it. MoESum of d takes it (FuseMoE); a
// second product of the same activations and ids (gate's up) joins it,
// and then the gated activation of the two takes both (FuseMoEGLU).
type expertProduct struct {
	d, m, a, id *tensor
	experts     int
	up          *expertProduct // the joined product, or nil
	glu         *kernels.GLU   // with up: act(d)·up.d goes to gdst
	gdst        *tensor
}

// holdExpert takes a decode expert product for the ops that may follow,
// or says it cannot. Nothing else may be pending: ops are recorded in
// order.
func (f *fuser) holdExpert(d, m, a, id *tensor, experts int) bool {
	if id.rows > kernels.MaxMatVecCols || len(f.pending) > 0 {
		return false
	}
	e := &expertProduct{d: d, m: m, a: a, id: id, experts: experts}
	if g := f.expert; g != nil {
		if f.on&FuseMoEGLU == 0 || g.up != nil || g.a != a || g.id != id || g.experts != experts || g.m.typ != m.typ ||
			g.m.rows != m.rows || g.m.cols != m.cols || g.d == a || d == a || g.d == d || !f.sameBuffer(g.m, m) {
			return false
		}
		g.up = e
		return true
	}
	if f.on&(FuseMoE|FuseMoEGLU) == 0 {
		return false
	}
	f.expert = e
	return true
}

// gatedExperts takes dst = act(gate)·up where gate and up are the held
// pair of expert products.
func (f *fuser) gatedExperts(g kernels.GLU, d, gate, up *tensor) bool {
	e := f.expert
	if e == nil || e.up == nil || e.glu != nil || e.d != gate || e.up.d != up || d == e.a ||
		d.rows != gate.rows || d.cols != gate.cols || up.rows != gate.rows || up.cols != gate.cols {
		return false
	}
	e.glu, e.gdst = &g, d
	return true
}

// sumExperts returns the held expert product that MoESum(d, y, w, r)
// mixes, and forgets it; nil if none fits. Its slots' results then never
// reach y: like the stacked products' gate and up under FuseGLU, an
// expert product's result is read by the mix alone (model.build).
func (f *fuser) sumExperts(d, y, w, r *tensor) *expertProduct {
	e := f.expert
	if e == nil || f.on&FuseMoE == 0 || e.up != nil || e.d != y || e.a == d || w.cols != e.id.cols || d.rows != e.id.rows || d.cols != e.d.cols || r.rows != d.rows || r.cols != d.cols {
		return nil
	}
	f.expert = nil
	return e
}

// routerFused says whether Route takes router.comp (FuseRouter): F32
// router weights of as many rows as there are logits, in decode and
// prefill alike (a prefill batch's router product on the tiled kernel had
// too few rows for its tiles: a handful of workgroups walking all of K).
func (f *fuser) routerFused(l, m, a *tensor) bool {
	// Tokens go along the grid's y.
	return f.on&FuseRouter != 0 && m.typ == quant.F32 && a.rows == l.rows && a.rows <= kernels.GridLimit &&
		m.rows == l.cols && m.cols == a.cols && a.cols%4 == 0
}

// normed is an RMSNorm dst = norm(x)·w recorded as the op just before: a
// fused router that reads dst takes x instead and normalises it itself.
type normed struct {
	dst, x, w *tensor
	eps       float32
}

// feeds says whether a is the norm's output, from an input a router can
// normalise (F32 weights of its width).
func (n *normed) feeds(a *tensor) bool {
	return n != nil && n.dst == a && n.x.rows == a.rows && n.x.cols == a.cols && n.w.typ == quant.F32 && n.w.rows*n.w.cols == a.cols
}

// takeExpert returns the held expert product (nil if none) and forgets it.
func (f *fuser) takeExpert() *expertProduct {
	e := f.expert
	f.expert = nil
	return e
}

// product takes dst = w·x into a pending fusion, or says it cannot.
func (f *fuser) product(d, m, a *tensor) bool {
	if f.on&FuseStack == 0 || f.expert != nil || a.rows > kernels.MaxMatVecCols || f.k.UseCoop(m.typ, a.rows, a.cols) || !isWeightType(m) {
		return false
	}
	q8 := f.k.UseQ8(m.typ)
	if q8 && !q8Able(a) {
		return false
	}
	for _, fu := range f.pending {
		w := fu.mats[0].w
		if fu.x == a && w.cols == m.cols && fu.q8 == q8 && len(fu.mats) < kernels.MaxStack && fu.gated == nil &&
			!fu.mixed() && (w.typ == m.typ || kernels.StackMixes(w.typ) && kernels.StackMixes(m.typ)) && f.sameBuffer(w, m) {
			// A K-quant of another type (Q4_K_M's Q6_K v after Q4_K q
			// and k) joins as the stack's last matrix
			// (kernels.Stack.LastType); nothing joins after it.
			fu.mats = append(fu.mats, fusedMat{w: m, dst: d})
			return true
		}
	}
	// Another type over the same activations, where the kernel cannot
	// take it in the stack, starts a second fusion beside the first: the
	// ops after them may still attach to either. Anything else ends what
	// is pending.
	if len(f.pending) > 0 && f.pending[0].x != a {
		return false
	}
	f.pending = append(f.pending, &fusion{x: a, q8: q8, mats: []fusedMat{{w: m, dst: d}}})
	return true
}

// mixed says whether fu's last matrix is of another type than its first.
func (fu *fusion) mixed() bool {
	return fu.mats[len(fu.mats)-1].w.typ != fu.mats[0].w.typ
}

func isWeightType(m *tensor) bool {
	for _, t := range kernels.WeightTypes {
		if t == m.typ {
			return true
		}
	}
	return false
}

// find returns the pending fusion and matrix whose result is t.
func (f *fuser) find(t *tensor) (*fusion, *fusedMat) {
	for _, fu := range f.pending {
		for i := range fu.mats {
			if fu.mats[i].dst == t {
				return fu, &fu.mats[i]
			}
		}
	}
	return nil, nil
}

// bias takes x += b where x is a pending product's result.
func (f *fuser) bias(x, b *tensor) bool {
	fu, m := f.find(x)
	if f.on&FuseRoPE == 0 || m == nil || m.bias != nil || m.rope || m.cache != 0 || fu.gated != nil ||
		b.rows*b.cols != x.cols || b.typ != x.typ {
		return false
	}
	m.bias = b
	return true
}

// ropeFits says whether the stack kernel can rotate a matrix of rows rows
// by r alongside fu's other rotations.
func (f *fuser) ropeFits(fu *fusion, rows int, r backend.RoPE) bool {
	if r.HeadDim <= 0 || rows%r.HeadDim != 0 || r.Dims%2 != 0 || r.Dims < 2 || r.Dims > r.HeadDim || (r.NeoX && r.Dims%4 != 0) {
		return false
	}
	if fu.rope == nil {
		return true
	}
	o := *fu.rope
	return o.HeadDim == r.HeadDim && o.Dims == r.Dims && o.NeoX == r.NeoX && o.Base == r.Base && o.Scale == r.Scale && o.Factors == r.Factors
}

// rope takes the rotation of x in place where x is a pending result.
func (f *fuser) rope(x *tensor, r backend.RoPE) bool {
	fu, m := f.find(x)
	if f.on&FuseRoPE == 0 || m == nil || m.rope || m.cache != 0 || !f.ropeFits(fu, m.w.rows, r) {
		return false
	}
	m.rope, fu.rope = true, &r
	return true
}

// storeKV takes the store of k (rotated by r where not nil) and v into
// layer's cache where both are pending results.
func (f *fuser) storeKV(layer int, k, v *tensor, r *backend.RoPE) bool {
	kf, km := f.find(k)
	vf, vm := f.find(v)
	if f.on&FuseRoPE == 0 || km == nil || vm == nil || km.rope || km.cache != 0 || vm.rope || vm.cache != 0 || km.w.rows%2 != 0 {
		return false
	}
	for _, fu := range []*fusion{kf, vf} {
		for _, m := range fu.mats {
			if m.cache != 0 && fu.layer != layer {
				return false // one layer's cache per fusion
			}
		}
	}
	if r != nil && !f.ropeFits(kf, km.w.rows, *r) {
		return false
	}
	if r != nil {
		km.rope, kf.rope = true, r
	}
	km.cache, vm.cache = cacheK, cacheV
	kf.layer, vf.layer = layer, layer
	return true
}

// gated takes dst = act(gate)·up where gate and up are the two products of
// one pending fusion; q8 says whether dst should get its 8-bit copy too.
func (f *fuser) gated(g kernels.GLU, d, gate, up *tensor, q8 bool) bool {
	fu, gm := f.find(gate)
	uf, um := f.find(up)
	if f.on&FuseGLU == 0 || gm == nil || fu != uf || len(fu.mats) != 2 || gm != &fu.mats[0] || um != &fu.mats[1] || fu.mixed() ||
		gm.bias != nil || um.bias != nil || gm.rope || um.rope || gm.cache != 0 || um.cache != 0 ||
		gate.rows != up.rows || gate.cols != up.cols || d.rows != gate.rows || d.cols != gate.cols {
		return false
	}
	fu.gated, fu.gdst, fu.gq8 = &g, d, q8
	if q8 {
		// The q8 copy needs whole blocks of rows and workgroups whose
		// halves divide a block (kernels.Stack.GatedQ8).
		sh := f.k.StackShape(fu.stack(f.n, 0, vk.Binding{}, vk.Binding{}))
		if d.cols%32 != 0 || 32%(sh.Rows/2) != 0 {
			fu.gated, fu.gdst, fu.gq8 = nil, nil, false
			return false
		}
	}
	return true
}

// plain says whether fu is one product with nothing to finish, which the
// plain kernels record as they would without fusions.
func (fu *fusion) plain() bool {
	m := fu.mats[0]
	return len(fu.mats) == 1 && m.bias == nil && !m.rope && m.cache == 0 && fu.gated == nil
}

// caches says whether fu stores into the KV cache.
func (fu *fusion) caches() bool {
	for _, m := range fu.mats {
		if m.cache != 0 {
			return true
		}
	}
	return false
}

// take returns the pending fusions and forgets them.
func (f *fuser) take() []*fusion {
	p := f.pending
	f.pending = nil
	return p
}

// stack is fu as a kernels.Stack over n columns, with the tensors'
// bindings (a plan's are zero) and kc, vc as the layer's caches; the
// caller fills X (and GatedQ8's binding, Step, Rope.Factors).
func (fu *fusion) stack(n, slots int, kc, vc vk.Binding) *kernels.Stack {
	w := fu.mats[0].w
	st := &kernels.Stack{Type: w.typ, N: n, K: w.cols, Q8: fu.q8, Slots: slots}
	if fu.mixed() {
		st.LastType = fu.mats[len(fu.mats)-1].w.typ
	}
	if fu.rope != nil {
		r, _ := kernelRoPE(*fu.rope)
		st.Rope = r
	}
	for _, m := range fu.mats {
		sm := kernels.StackMat{W: m.w.b, Rows: m.w.rows, Out: m.dst.b, Rope: m.rope, Cache: m.cache != 0}
		switch m.cache {
		case cacheK:
			sm.Out = kc
		case cacheV:
			sm.Out = vc
		}
		if m.bias != nil {
			b := m.bias.b
			sm.Bias = &b
		}
		st.Mats = append(st.Mats, sm)
	}
	if fu.gated != nil {
		st.Gated = fu.gated
		st.Mats[0].Out = fu.gdst.b
		if fu.gq8 {
			st.GatedQ8 = &vk.Binding{}
		}
	}
	return st
}
