package kernels

import (
	"fmt"
	"math"

	"github.com/vkinfer/vkinfer/quant"
	"github.com/vkinfer/vkinfer/vk"
)

// MaxExperts is the most experts Route chooses among (route.comp's
// shared-memory capacity, MAXE).
const MaxExperts = 1024

// Route records route.comp: for each of rows tokens, softmax over the E
// router logits (rows × E), the k most probable experts into ids (rows × k,
// exact f32 integers, descending, ties to the lower index) and their
// probabilities into weights (rows × k), renormalised to sum 1 when norm.
func (k *Kernels) Route(s *vk.Sequence, ids, weights, logits vk.Binding, rows, experts, topK int, norm bool) error {
	return k.route(s, ids, weights, logits, routeParts{}, rows, experts, topK, norm)
}

// routeParts is what route.comp sums into the logits before it routes
// (PARTS): n parts of K-value products (none: the logits are given), and
// with rms the residual x whose RMS factor scales them.
type routeParts struct {
	parts, x vk.Binding
	n, K     int
	rms      bool
	eps      float32
}

// route records route.comp, for Route and RouteParts.
func (k *Kernels) route(s *vk.Sequence, ids, weights, logits vk.Binding, in routeParts, rows, experts, topK int, norm bool) error {
	if err := positive("route", rows, experts, topK); err != nil {
		return err
	}
	if topK > experts || experts > MaxExperts {
		return fmt.Errorf("kernels: route: top %d of %d experts (at most %d experts)", topK, experts, MaxExperts)
	}
	for _, c := range []struct {
		what string
		b    vk.Binding
		n    int64
	}{{"route logits", logits, f32(rows * experts)}, {"route ids", ids, f32(rows * topK)}, {"route weights", weights, f32(rows * topK)}} {
		if err := need(c.what, c.b, c.n); err != nil {
			return err
		}
	}
	unused, err := k.unusedInput()
	if err != nil {
		return err
	}
	parts, x := unused, unused
	if in.n > 0 {
		parts = in.parts
	}
	if in.rms {
		x = in.x
	}
	p, err := k.pipeline(k.routeSpec(norm, in.n > 0, in.rms, experts))
	if err != nil {
		return err
	}
	gx, gy := k.grid(rows)
	label := fmt.Sprintf("top %d of %d", topK, experts)
	if in.n > 0 {
		label += fmt.Sprintf(", %d parts", in.n)
	}
	s.Label(label)
	s.Dispatch(p, []vk.Binding{logits, ids, weights, parts, x},
		vk.Push(uint32(rows), uint32(experts), uint32(topK), uint32(in.n), uint32(in.K/4), in.eps), gx, gy, 1)
	return nil
}

// RouteSpec is the pipeline Route builds for experts experts (its top-k
// holds that many in registers).
func (k *Kernels) RouteSpec(norm bool, experts int) vk.PipelineSpec {
	return k.routeSpec(norm, false, false, experts)
}

// routeSpec is route.comp's pipeline; parts and rms are its PARTS and RMS.
func (k *Kernels) routeSpec(norm, parts, rms bool, experts int) vk.PipelineSpec {
	return spec("route", 5, 24, 0, Lanes, uint32(experts), b32(norm), k.narrowest(), b32(parts), b32(rms))
}

// The prefill router in parts (router_parts.comp, then route.comp with
// PARTS): a tile of routerTileTokens tokens × routerTileExperts experts a
// workgroup, K cut into splits of whole chunks of routerChunk values so
// that the tiles fill the device.
const (
	routerTileTokens  = 64
	routerTileExperts = 64
	routerChunk       = 32
)

// RouterPartsMinRows is the least batch the engine routes in parts
// (RouterParts and RouteParts): half a tile of tokens. Fewer tokens, as
// decode's and most server steps, take router.comp in one dispatch, which
// reads the router matrix once a token: a dependent dispatch fewer.
const RouterPartsMinRows = routerTileTokens / 2

// routerSpan is the values of K a split of the prefill router takes (whole
// chunks) and the splits that makes: about two workgroups a compute unit
// (32 where the device does not say) over the batch's tiles, at least a
// chunk each.
func (k *Kernels) routerSpan(rows, experts, K int) (span, splits int) {
	cus := k.info.ComputeUnits
	if cus == 0 {
		cus = 32
	}
	tiles := ceil(rows, routerTileTokens) * ceil(experts, routerTileExperts)
	chunks := ceil(K, routerChunk)
	want := min(max(ceil(2*cus, tiles), 1), chunks)
	span = ceil(chunks, want) * routerChunk
	return span, ceil(K, span)
}

// RouterPartsBytes is the scratch RouterParts writes and RouteParts reads
// for rows tokens over experts experts of K values.
func (k *Kernels) RouterPartsBytes(rows, experts, K int) int64 {
	_, splits := k.routerSpan(rows, experts, K)
	return f32(splits * rows * experts)
}

// RouterParts records router_parts.comp, a prefill batch's router product
// in parts of K: parts (RouterPartsBytes) gets, for each split of K, W · h
// over its values, h being x times the norm's weight g where g is not nil
// (RouteParts then applies the norm's factor), else x. W is experts × K
// F32, x rows × K.
func (k *Kernels) RouterParts(s *vk.Sequence, parts, w, x vk.Binding, g *vk.Binding, rows, experts, K int) error {
	for _, dims := range [][]int{{rows, experts}, {experts, K}, {rows, K}} {
		if err := positive("router parts", dims...); err != nil {
			return err
		}
	}
	if K%4 != 0 {
		return fmt.Errorf("kernels: router parts: rows of %d values: want a multiple of 4", K)
	}
	if err := vec4Aligned("router parts", w, x); err != nil {
		return err
	}
	span, splits := k.routerSpan(rows, experts, K)
	gb, err := k.unusedInput()
	if err != nil {
		return err
	}
	if g != nil {
		if err := vec4Aligned("router parts", *g); err != nil {
			return err
		}
		if err := need("router norm weights", *g, f32(K)); err != nil {
			return err
		}
		gb = *g
	}
	for _, c := range []struct {
		what string
		b    vk.Binding
		n    int64
	}{{"router parts", parts, k.RouterPartsBytes(rows, experts, K)}, {"router weights matrix", w, f32(experts * K)}, {"router activations", x, f32(rows * K)}} {
		if err := need(c.what, c.b, c.n); err != nil {
			return err
		}
	}
	gx, gy := ceil(rows, routerTileTokens), ceil(experts, routerTileExperts)
	if lim := k.info.MaxWorkgroupCount; gx > int(lim[0]) || gy > int(lim[1]) || splits > int(lim[2]) {
		return fmt.Errorf("kernels: router parts: %dx%dx%d workgroups exceed the device's grid %v", gx, gy, splits, lim)
	}
	p, err := k.pipeline(k.RouterPartsSpec(g != nil))
	if err != nil {
		return err
	}
	s.Label(fmt.Sprintf("%dx%d F32, %d parts", experts, K, splits))
	s.Dispatch(p, []vk.Binding{parts, w, x, gb}, vk.Push(uint32(rows), uint32(experts), uint32(K/4), uint32(span/4)),
		uint32(gx), uint32(gy), uint32(splits))
	return nil
}

// RouterPartsSpec is the pipeline RouterParts builds.
func (k *Kernels) RouterPartsSpec(rms bool) vk.PipelineSpec {
	// The workgroup size is fixed in the shader (16 × 16 lanes).
	return spec("router_parts", 4, 16, 0, b32(rms))
}

// RouteParts records route.comp over RouterParts' parts: each token's
// parts summed in their order, times the RMS norm's factor of its row of
// x where norm is not nil (RouterParts applied the weight), into logits
// (rows × experts), then Route's top-k into ids and weights.
func (k *Kernels) RouteParts(s *vk.Sequence, ids, weights, logits, parts, x vk.Binding, norm *RouterNorm, rows, experts, K, topK int, renorm bool) error {
	if err := positive("route parts", rows, experts, K); err != nil {
		return err
	}
	if K%4 != 0 {
		return fmt.Errorf("kernels: route parts: rows of %d values: want a multiple of 4", K)
	}
	_, splits := k.routerSpan(rows, experts, K)
	in := routeParts{parts: parts, n: splits, K: K}
	if err := need("route parts", parts, k.RouterPartsBytes(rows, experts, K)); err != nil {
		return err
	}
	if norm != nil {
		if err := vec4Aligned("route parts", x); err != nil {
			return err
		}
		if err := need("route activations", x, f32(rows*K)); err != nil {
			return err
		}
		in.x, in.rms, in.eps = x, true, norm.Eps
	}
	return k.route(s, ids, weights, logits, in, rows, experts, topK, renorm)
}

// RoutePartsSpec is the pipeline RouteParts builds.
func (k *Kernels) RoutePartsSpec(renorm, rms bool, experts int) vk.PipelineSpec {
	return k.routeSpec(renorm, true, rms, experts)
}

// RouterRowsFor is how many experts' logits a router workgroup computes
// for a batch of rows tokens. Decode's few tokens need the experts spread
// over many workgroups to fill the GPU: one expert each, so that the
// dispatch is as many short workgroups as there are experts, each lane's
// share of the pass one trip of two vec4s (measured in docs/KERNELS.md,
// "Mixture of experts"). A prefill batch has workgroups enough in its
// tokens, and each workgroup reads (and, fused with the norm, normalises)
// its token's row once for all its experts.
func RouterRowsFor(rows int) int {
	if rows <= MaxMatVecCols {
		return 1
	}
	return 16
}

// routerLanes is the router's workgroup size for rows tokens. In decode the
// dispatch is a chain of dependent steps (the pass over x and the rows of
// W, the last workgroup's top-k), and the pass is as many trips per lane
// as K has pairs of vec4s per lane: 256 lanes take Qwen3-30B-A3B's 2048
// values in one, where 64 took four. A prefill batch has workgroups
// enough in its tokens.
func (k *Kernels) routerLanes(rows int) int {
	if rows <= MaxMatVecCols {
		return min(256, k.info.MaxWorkgroupInvocations)
	}
	return Lanes
}

// RouterNorm asks Router to take the residual instead of the normed
// activations: h = x / sqrt(mean(x²) + Eps) · G, computed in the kernel.
type RouterNorm struct {
	G   vk.Binding // K norm weights
	Eps float32
}

// Router records router.comp, a mixture of experts' router product and
// Route's top-k in one dispatch: logits = W · h (W: experts × K F32, h:
// rows × K; logits: rows × experts, a scratch the kernel reads back), then
// ids and weights as Route writes them. With norm, x is the residual and
// h its RMS norm, which the kernel computes; else x is h.
func (k *Kernels) Router(s *vk.Sequence, ids, weights, logits, w, x vk.Binding, norm *RouterNorm, rows, experts, K, topK int, renorm bool) error {
	// Each array's extents: logits, ids and weights, the matrix, the activations.
	for _, dims := range [][]int{{rows, experts}, {rows, topK}, {experts, K}, {rows, K}} {
		if err := positive("router", dims...); err != nil {
			return err
		}
	}
	if topK > experts || experts > MaxExperts {
		return fmt.Errorf("kernels: router: top %d of %d experts (at most %d experts)", topK, experts, MaxExperts)
	}
	if lim := int(k.info.MaxWorkgroupCount[1]); rows > lim {
		return fmt.Errorf("kernels: router: %d tokens exceed the device's grid (%d along y)", rows, lim)
	}
	if K%4 != 0 {
		return fmt.Errorf("kernels: router: rows of %d values: want a multiple of 4", K)
	}
	if err := vec4Aligned("router", w, x); err != nil {
		return err
	}
	for _, c := range []struct {
		what string
		b    vk.Binding
		n    int64
	}{{"router logits", logits, f32(rows * experts)}, {"router ids", ids, f32(rows * topK)}, {"router weights", weights, f32(rows * topK)},
		{"router weights matrix", w, f32(experts * K)}, {"router activations", x, f32(rows * K)}} {
		if err := need(c.what, c.b, c.n); err != nil {
			return err
		}
	}
	g, eps := vk.Binding{}, float32(0)
	if norm != nil {
		if err := vec4Aligned("router", norm.G); err != nil {
			return err
		}
		if err := need("router norm weights", norm.G, f32(K)); err != nil {
			return err
		}
		g, eps = norm.G, norm.Eps
	} else {
		var err error
		if g, err = k.unusedInput(); err != nil {
			return err
		}
	}
	p, err := k.pipeline(k.RouterSpec(renorm, norm != nil, rows, experts))
	if err != nil {
		return err
	}
	counts, err := k.counters(rows)
	if err != nil {
		return err
	}
	s.Label(fmt.Sprintf("%dx%d F32, top %d", experts, K, topK))
	s.Dispatch(p, []vk.Binding{logits, ids, weights, w, x, g, counts},
		vk.Push(uint32(rows), uint32(experts), uint32(topK), uint32(K/4), math.Float32bits(eps)), uint32(ceil(experts, RouterRowsFor(rows))), uint32(rows), 1)
	return nil
}

// RouterSpec is the pipeline Router builds for rows tokens and experts
// experts (its top-k holds that many in registers).
func (k *Kernels) RouterSpec(renorm, rms bool, rows, experts int) vk.PipelineSpec {
	return spec("router", 7, 20, 0, uint32(k.routerLanes(rows)), uint32(experts), b32(renorm), uint32(RouterRowsFor(rows)), b32(rms),
		k.narrowest())
}

// MatVecID records matvec_id.comp, llama.cpp's mul_mat_id for decode: w
// holds experts matrices of rows × K (expert e's row r at row e·rows + r),
// ids holds an expert per slot (Route's output: slots = tokens·topK), and
// dst[slot] = W_ids[slot] · x_slot, x_slot being x's row slot when x has a
// row per slot (xRows == slots) or row slot/topK when it has one per token
// (xRows == slots/topK). Only the chosen experts' rows are read. The shape
// is k.MatVec's.
func (k *Kernels) MatVecID(s *vk.Sequence, dst, w, x, ids vk.Binding, t quant.Type, slots, topK, xRows, experts, rows, K int) error {
	return k.MatVecIDWith(s, dst, w, x, ids, t, slots, topK, xRows, experts, rows, K, k.MatVec)
}

// MatVecIDWith is MatVecID in shape sh (Lanes, Rows and Unroll as the
// matrix-vector kernel's).
func (k *Kernels) MatVecIDWith(s *vk.Sequence, dst, w, x, ids vk.Binding, t quant.Type, slots, topK, xRows, experts, rows, K int, sh MatVecShape) error {
	const name = "matvec_id"
	push, err := k.idProduct(name, w, x, ids, t, slots, topK, xRows, experts, rows, K, sh, false)
	if err != nil {
		return err
	}
	if err := need(name+" dst", dst, f32(slots*rows)); err != nil {
		return err
	}
	groups := ceil(rows, sh.Rows)
	if err := positive(name, groups, slots); err != nil { // workgroup indices
		return err
	}
	p, err := k.pipeline(k.MatVecIDSpec(t, sh))
	if err != nil {
		return err
	}
	gx, gy := k.grid(groups * slots)
	s.Label(fmt.Sprintf("%d experts of %dx%d %s, %d slots", experts, rows, K, t, slots))
	s.Dispatch(p, []vk.Binding{dst, w, x, ids}, vk.Push(push...), gx, gy, 1)
	return nil
}

// idProduct checks the operands matvec_id.glsl's variants share (all but
// dst; x in the q8 layout with q8) and returns their push constants.
func (k *Kernels) idProduct(name string, w, x, ids vk.Binding, t quant.Type, slots, topK, xRows, experts, rows, K int, sh MatVecShape, q8 bool) ([]any, error) {
	if err := positive(name, slots, topK, experts); err != nil {
		return nil, err
	}
	perSlot := xRows == slots
	if !perSlot && (slots%topK != 0 || xRows != slots/topK) {
		return nil, fmt.Errorf("kernels: %s: %d x rows for %d slots of %d per token", name, xRows, slots, topK)
	}
	if err := positive(name, experts, rows); err != nil { // weight rows
		return nil, err
	}
	rb, err := weightRow(name, t, experts*rows, K)
	if err != nil {
		return nil, err
	}
	if K%4 != 0 {
		return nil, fmt.Errorf("kernels: %s: rows of %d values: need a multiple of 4 (x is read as vec4)", name, K)
	}
	if err := positive(name, slots, rows); err != nil { // dst indices
		return nil, err
	}
	if err := positive(name, xRows, K); err != nil { // x indices
		return nil, err
	}
	if err := need(name+" weights", w, round4(int64(experts)*int64(rows)*int64(rb))); err != nil {
		return nil, err
	}
	xSize := f32(xRows * K)
	if q8 {
		if !HasQ8(t) {
			return nil, fmt.Errorf("kernels: %s: 8-bit activations with weights of type %s: %w", name, t, quant.ErrUnsupported)
		}
		if !k.info.IntegerDot {
			return nil, fmt.Errorf("kernels: %s: the device lacks the integer dot product feature", name)
		}
		if err := vec4Aligned(name, x); err != nil {
			return nil, err
		}
		xSize = Q8Bytes(xRows, K)
	}
	if err := need(name+" x", x, xSize); err != nil {
		return nil, err
	}
	if err := need(name+" ids", ids, f32(slots)); err != nil {
		return nil, err
	}
	if sh.Lanes < 1 || sh.Rows < 1 || sh.Unroll < 1 || sh.Lanes > k.info.MaxWorkgroupInvocations {
		return nil, fmt.Errorf("kernels: %s: shape %+v", name, sh)
	}
	if w.Off%16 != 0 { // read as 16-byte words, as matvec
		return nil, fmt.Errorf("kernels: %s: weights at offset %d: need a multiple of 16", name, w.Off)
	}
	return []any{uint32(rows), uint32(K), uint32(rb), uint32(ceil(rows, sh.Rows)), uint32(slots), uint32(topK), b32(perSlot), uint32(experts)}, nil
}

// MatVecIDSpec is the pipeline MatVecIDWith builds for weights of type t
// in shape sh.
func (k *Kernels) MatVecIDSpec(t quant.Type, sh MatVecShape) vk.PipelineSpec {
	return spec("matvec_id", 4, 32, sh.Wave,
		uint32(sh.Lanes), uint32(t), 1, uint32(sh.Rows), k.subgroups(sh.Lanes), uint32(sh.Unroll))
}

// MatVecIDSum records matvec_id_sum.comp: MatVecID for tokens·topK slots
// followed by MoESum in one dispatch, dst[t] = (Σ_j weights[t][j] ·
// W_ids[t·topK+j] · x_slot) + r[t] for each of tokens rows of rows values
// (x and xRows as MatVecID's); dst may be r. The shape is IDSumShape's.
// With q8, x is in the q8 layout (the gated activation's copy that
// MatVecIDGLU writes) and meets quantized weights in integer dot products
// (matvec_id_sum_q8.comp; Kernels.UseQ8).
func (k *Kernels) MatVecIDSum(s *vk.Sequence, dst, w, x, ids, weights, r vk.Binding, t quant.Type, tokens, topK, xRows, experts, rows, K int, q8 bool) error {
	return k.MatVecIDSumWith(s, dst, w, x, ids, weights, r, t, tokens, topK, xRows, experts, rows, K, k.IDSumShape(t, q8, rows, K, topK), q8)
}

// IDSumShape is the shape MatVecIDSum uses for rows × K experts of type
// t of which each token mixes topK: k.MatVec, or with q8 k.MatVecQ8For's
// for rows of topK·K values, since a workgroup's lanes take the slices of
// all the token's experts at once. Q6_K takes twice those lanes (up to
// 128): its slices are stitched from 32-bit words, so a lane's chain of
// them is the longer (BenchmarkMoEDecode; docs/KERNELS.md).
func (k *Kernels) IDSumShape(t quant.Type, q8 bool, rows, K, topK int) MatVecShape {
	if !q8 {
		return k.MatVec
	}
	sh := k.MatVecQ8For(rows, K*topK)
	if t == quant.Q6_K && k.MatVecQ8.Lanes == 0 && sh.Lanes < 128 {
		sh.Lanes = min(2*sh.Lanes, 128, k.info.MaxWorkgroupInvocations)
	}
	return sh
}

// MatVecIDSumWith is MatVecIDSum in shape sh.
func (k *Kernels) MatVecIDSumWith(s *vk.Sequence, dst, w, x, ids, weights, r vk.Binding, t quant.Type, tokens, topK, xRows, experts, rows, K int, sh MatVecShape, q8 bool) error {
	name := "matvec_id_sum"
	if q8 {
		name += "_q8"
	}
	if err := positive(name, tokens, topK); err != nil {
		return err
	}
	if err := positive(name, tokens*topK, rows); err != nil { // weights and dst indices
		return err
	}
	if err := need(name+" weights", weights, f32(tokens*topK)); err != nil {
		return err
	}
	if err := need(name+" residual", r, f32(tokens*rows)); err != nil {
		return err
	}
	push, err := k.idProduct(name, w, x, ids, t, tokens*topK, topK, xRows, experts, rows, K, sh, q8)
	if err != nil {
		return err
	}
	if err := need(name+" dst", dst, f32(tokens*rows)); err != nil {
		return err
	}
	groups := ceil(rows, sh.Rows)
	if err := positive(name, groups*tokens); err != nil { // workgroup indices
		return err
	}
	p, err := k.pipeline(k.MatVecIDSumSpec(t, sh, q8))
	if err != nil {
		return err
	}
	gx, gy := k.grid(groups * tokens)
	s.Label(fmt.Sprintf("%d experts of %dx%d %s, %d tokens of %d, summed", experts, rows, K, t, tokens, topK))
	s.Dispatch(p, []vk.Binding{dst, w, x, ids, weights, r}, vk.Push(push...), gx, gy, 1)
	return nil
}

// MatVecIDSumSpec is the pipeline MatVecIDSumWith builds for weights of
// type t in shape sh, x in 8 bits or not.
func (k *Kernels) MatVecIDSumSpec(t quant.Type, sh MatVecShape, q8 bool) vk.PipelineSpec {
	name := "matvec_id_sum"
	if q8 {
		name += "_q8"
	}
	return spec(name, 6, 32, sh.Wave,
		uint32(sh.Lanes), uint32(t), 1, uint32(sh.Rows), k.subgroups(sh.Lanes), uint32(sh.Unroll))
}

// MatVecIDGLU records matvec_id_glu.comp: the two products MatVecID
// would record for the experts' gate and up matrices (wGate, wUp: stacks
// of experts matrices of rows × K, in one buffer) and dst[slot] =
// act(gate_slot) · up_slot, act being g's, in one dispatch. The shape is
// shape IDGLUShape's. With q8, x is in the q8 layout (QuantizeQ8, the
// 8-bit copy rms_norm writes) and meets quantized weights in integer dot
// products (matvec_id_glu_q8.comp; Kernels.UseQ8). With q8Out (not nil)
// dst's q8 copy is written too, for the down product (rows a multiple of
// 32 and half the shape's rows dividing 32).
func (k *Kernels) MatVecIDGLU(s *vk.Sequence, g GLU, dst, wGate, wUp, x, ids vk.Binding, q8Out *vk.Binding, t quant.Type, slots, topK, xRows, experts, rows, K int, q8 bool) error {
	return k.MatVecIDGLUWith(s, g, dst, wGate, wUp, x, ids, q8Out, t, slots, topK, xRows, experts, rows, K, k.IDGLUShape(q8, rows, K, topK), q8)
}

// IDGLUShape is the shape MatVecIDGLU uses for rows × K experts of which
// each token takes topK: k.MatVec with Rows raised to an even count of at
// least gatedRows (a workgroup computes Rows/2 rows of gate and of up), or
// with q8 k.MatVecQ8 of idGatedRows rows, its lanes sized (SizeMatVecQ8)
// for the workgroups of all topK experts' gate and up rows, which one
// dispatch runs together.
func (k *Kernels) IDGLUShape(q8 bool, rows, K, topK int) MatVecShape {
	if q8 {
		sh := k.MatVecQ8
		sh.Rows = idGatedRows
		return k.SizeMatVecQ8(sh, 2*topK*rows, K)
	}
	sh := k.MatVec
	sh.Rows = max(ceil(sh.Rows, 2)*2, gatedRows)
	return sh
}

// MatVecIDGLUWith is MatVecIDGLU in shape sh (Rows even).
func (k *Kernels) MatVecIDGLUWith(s *vk.Sequence, g GLU, dst, wGate, wUp, x, ids vk.Binding, q8Out *vk.Binding, t quant.Type, slots, topK, xRows, experts, rows, K int, sh MatVecShape, q8 bool) error {
	name := "matvec_id_glu"
	if q8 {
		name += "_q8"
	}
	if err := g.check(); err != nil {
		return err
	}
	if sh.Rows < 2 || sh.Rows%2 != 0 {
		return fmt.Errorf("kernels: %s: shape %v: gate beside up needs an even row count", name, sh)
	}
	push, err := k.idProduct(name, wGate, x, ids, t, slots, topK, xRows, experts, rows, K, sh, q8)
	if err != nil {
		return err
	}
	if _, err := k.idProduct(name, wUp, x, ids, t, slots, topK, xRows, experts, rows, K, sh, q8); err != nil {
		return err
	}
	if wUp.Buf != wGate.Buf {
		return fmt.Errorf("kernels: %s: the up experts are in another buffer than the gate experts", name)
	}
	// One binding spans both stacks, each addressed by its offset in it.
	size := round4(int64(experts) * int64(rows) * int64(push[2].(uint32)))
	lo := min(wGate.Off, wUp.Off)
	hi := max(wGate.Off, wUp.Off) + size
	if hi-lo > math.MaxUint32 {
		return fmt.Errorf("kernels: %s: the gate and up experts span %d bytes, more than 32-bit offsets reach", name, hi-lo)
	}
	if err := need(name+" dst", dst, f32(slots*rows)); err != nil {
		return err
	}
	groups := ceil(rows, sh.Rows/2)
	if err := positive(name, groups*slots); err != nil { // workgroup indices
		return err
	}
	push[3] = uint32(groups)
	// Without q8Out the q8 and counter bindings are dst, which the
	// dispatch writes anyway (matvec_stack's rule), and never accessed.
	qb, counts := dst, dst
	if q8Out != nil {
		if rows%32 != 0 || 32%(sh.Rows/2) != 0 {
			return fmt.Errorf("kernels: %s: q8 copy of rows of %d values in shape %v: need whole blocks of 32, and half the rows dividing 32", name, rows, sh)
		}
		if err := need(name+" q8", *q8Out, Q8Bytes(slots, rows)); err != nil {
			return err
		}
		qb = *q8Out
		if counts, err = k.counters(slots * rows / 32); err != nil {
			return err
		}
	}
	p, err := k.pipeline(k.MatVecIDGLUSpec(t, g, sh, q8, q8Out != nil))
	if err != nil {
		return err
	}
	gx, gy := k.grid(groups * slots)
	s.Label(fmt.Sprintf("%d experts of %dx%d %s, %d slots, %s", experts, rows, K, t, slots, g))
	s.Dispatch(p, []vk.Binding{dst, {Buf: wGate.Buf, Off: lo, Size: hi - lo}, x, ids, qb, counts},
		vk.Push(append(push, uint32(wGate.Off-lo), uint32(wUp.Off-lo))...), gx, gy, 1)
	return nil
}

// MatVecIDGLUSpec is the pipeline MatVecIDGLUWith builds for weights of
// type t, activation g, shape sh, x in 8 bits or not and the output's q8
// copy or not.
func (k *Kernels) MatVecIDGLUSpec(t quant.Type, g GLU, sh MatVecShape, q8, q8Out bool) vk.PipelineSpec {
	act := uint32(0) // glu.glsl's GLU_SILU
	if g == GeGLU {
		act = 1 // GLU_GELU
	}
	name := "matvec_id_glu"
	if q8 {
		name += "_q8"
	}
	return spec(name, 6, 40, sh.Wave,
		uint32(sh.Lanes), uint32(t), 1, uint32(sh.Rows), k.subgroups(sh.Lanes), uint32(sh.Unroll), 0, act, b32(q8Out))
}

// MoESum records moe_sum.comp: dst[i] = (Σ_j weights[i][j]·y[i·topK+j]) +
// r[i] for rows × cols, y holding rows·topK rows; dst may be r.
func (k *Kernels) MoESum(s *vk.Sequence, dst, y, weights, r vk.Binding, rows, cols, topK int) error {
	if err := positive("moe_sum", rows, cols, topK); err != nil { // y indices
		return err
	}
	for _, b := range []struct {
		what string
		b    vk.Binding
		n    int
	}{{"dst", dst, rows * cols}, {"y", y, rows * topK * cols}, {"weights", weights, rows * topK}, {"residual", r, rows * cols}} {
		if err := need("moe_sum "+b.what, b.b, f32(b.n)); err != nil {
			return err
		}
	}
	p, err := k.pipeline(k.MoESumSpec())
	if err != nil {
		return err
	}
	gx, gy := k.grid(ceil(rows*cols, Lanes))
	s.Dispatch(p, []vk.Binding{dst, y, weights, r}, vk.Push(uint32(rows), uint32(cols), uint32(topK)), gx, gy, 1)
	return nil
}

// MoESumSpec is the pipeline MoESum builds.
func (k *Kernels) MoESumSpec() vk.PipelineSpec { return spec("moe_sum", 4, 12, 0, Lanes) }

// MoESortLanes is moe_sort.comp's workgroup size: the pairs of one round
// of its scatter.
const MoESortLanes = 256

// MoETiles is the most tiles of height bn that pairs over experts make
// (MoESort's list, each chosen expert's run cut into ⌈c/bn⌉): summed over
// the at most min(experts, pairs) chosen experts, ⌈c/bn⌉ ≤ (c + bn − 1)/bn
// gives (pairs + min(experts, pairs)·(bn − 1))/bn, an integer bound once
// rounded down. The gathered products' grids are this many tiles high.
func MoETiles(pairs, experts, bn int) int {
	return (pairs + min(experts, pairs)*(bn-1)) / bn
}

// MoESortWords is the size in 32-bit words of MoESort's output for pairs
// over experts in tiles of height bn: the offsets (experts+1), the sorted
// pairs, the tile count and 3 words for each of at most MoETiles tiles.
func MoESortWords(pairs, experts, bn int) int {
	return experts + 2 + pairs + 3*MoETiles(pairs, experts, bn)
}

// MoESort records moe_sort.comp, the counting sort of a prefill batch's
// pairs by expert on the device (one workgroup): ids holds an expert per
// pair (Route's output, pairs = tokens·topK); dst gets experts+1 uint32
// offsets (expert e's pairs at sorted positions offsets[e]..offsets[e+1]),
// the pairs' indices in sorted order, ascending within an expert
// (PackByExpert's Offsets and Perm), then the tile list of the gathered
// products: the number of tiles and, for each, its expert, first sorted
// position and pairs, each expert's run cut into tiles of at most height
// pairs (PackByExpert's naive cut at maxH = height), MoESortWords in all.
func (k *Kernels) MoESort(s *vk.Sequence, dst, ids vk.Binding, pairs, experts, height int) error {
	if err := positive("moe_sort", pairs, experts, height); err != nil {
		return err
	}
	if experts > MaxExperts {
		return fmt.Errorf("kernels: moe_sort: %d experts (at most %d)", experts, MaxExperts)
	}
	words := MoESortWords(pairs, experts, height)
	if err := positive("moe_sort", words); err != nil { // dst indices
		return err
	}
	if err := need("moe_sort ids", ids, f32(pairs)); err != nil {
		return err
	}
	if err := need("moe_sort dst", dst, f32(words)); err != nil {
		return err
	}
	p, err := k.pipeline(k.MoESortSpec())
	if err != nil {
		return err
	}
	s.Label(fmt.Sprintf("%d pairs over %d experts, tiles of %d", pairs, experts, height))
	s.Dispatch(p, []vk.Binding{ids, dst}, vk.Push(uint32(pairs), uint32(experts), uint32(height)), 1, 1, 1)
	return nil
}

// MoESortSpec is the pipeline MoESort builds.
func (k *Kernels) MoESortSpec() vk.PipelineSpec {
	return spec("moe_sort", 2, 12, 0, MoESortLanes, MaxExperts)
}
