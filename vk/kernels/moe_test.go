package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/vkinfer/vkinfer/internal/moeref"
	"github.com/vkinfer/vkinfer/quant"
	"github.com/vkinfer/vkinfer/vk"
)

// TestRoute checks route.comp against the float64 router on random logits
// (Qwen3-30B-A3B's 128 experts and 8 used, the tiny model's 8 and 2, every
// expert used, more experts than lanes, one), with and without
// renormalisation, the last row with one expert far ahead, whose
// runners-up all have probability 0 and are taken in index order.
func TestRoute(t *testing.T) {
	k := setup(t)
	rng := rand.New(rand.NewPCG(11, 12))
	for _, c := range []struct{ e, k, n int }{{8, 2, 7}, {128, 8, 3}, {7, 3, 1}, {5, 5, 2}, {1, 1, 1}, {300, 7, 2}, {MaxExperts, 4, 1}, {200, 200, 2}} {
		for _, norm := range []bool{true, false} {
			t.Run(fmt.Sprintf("e%d/k%d/n%d/norm=%v", c.e, c.k, c.n, norm), func(t *testing.T) {
				logits := normals(rng, c.n*c.e, 3)
				last := logits[(c.n-1)*c.e:]
				clear(last)
				last[c.e/2] = 1000
				lb := floatBuffer(t, logits)
				ib, wb := buffer(t, f32(c.n*c.k), nil), buffer(t, f32(c.n*c.k), nil)
				run(t, func(s *vk.Sequence) error {
					return k.Route(s, whole(ib), whole(wb), whole(lb), c.n, c.e, c.k, norm)
				})
				ids, w := read(t, ib, 0, c.n*c.k), read(t, wb, 0, c.n*c.k)
				for i := range c.n {
					wantIDs, wantW := moeref.Route(logits[i*c.e:(i+1)*c.e], c.k, norm)
					for j := range c.k {
						if got := ids[i*c.k+j]; got != float32(wantIDs[j]) {
							t.Fatalf("token %d slot %d: expert %v, want %d (ids %v)", i, j, got, wantIDs[j], ids[i*c.k:(i+1)*c.k])
						}
						if got := float64(w[i*c.k+j]); math.Abs(got-wantW[j]) > 1e-6 {
							t.Fatalf("token %d slot %d: weight %v, want %v", i, j, got, wantW[j])
						}
					}
				}
			})
		}
	}
	if err := k.Route(nil, vk.Binding{}, vk.Binding{}, vk.Binding{}, 1, 4, 5, true); err == nil {
		t.Error("top 5 of 4 experts recorded")
	}
	if err := k.Route(nil, vk.Binding{}, vk.Binding{}, vk.Binding{}, 1, MaxExperts+1, 1, true); err == nil {
		t.Error("more experts than route.comp holds recorded")
	}
}

// TestRouter checks the router product and top-k in one dispatch, for
// decode's few tokens and prefill's batches (RouterRowsFor): its
// logits against float64 products (of the RMS norm of x, with rms), and
// its ids and weights against moeref.Route of those logits, as TestRoute
// does. Each case runs three times in one submission, twice, with fresh
// activations each time.
func TestRouter(t *testing.T) {
	k := setup(t)
	testRouter(t, k, func(s *vk.Sequence, ids, weights, logits, w, x vk.Binding, norm *RouterNorm, n, e, K, topK int, renorm bool) error {
		return k.Router(s, ids, weights, logits, w, x, norm, n, e, K, topK, renorm)
	})
	b := vk.Binding{}
	if err := k.Router(nil, b, b, b, b, b, nil, 1, 4, 8, 5, true); err == nil {
		t.Error("top 5 of 4 experts recorded")
	}
	if err := k.Router(nil, b, b, b, b, b, nil, 1, 4, 6, 2, true); err == nil {
		t.Error("rows of 6 values recorded")
	}
	// One token more than the grid's y takes (devices allow 65535, or
	// more, up to what 32-bit indices leave).
	n := int(k.info.MaxWorkgroupCount[1]) + 1
	if err := k.Router(nil, b, b, b, b, b, nil, n, 4, 4, 2, true); n < 1<<29 && (err == nil || !strings.Contains(err.Error(), "grid")) {
		t.Errorf("%d tokens: %v, want the device's grid limit", n, err)
	}
}

// TestRouterParts checks the prefill router in parts (RouterParts, then
// RouteParts over its scratch) on TestRouter's cases: one token to 300,
// tiles of tokens and experts partly past the batch and E, K from 4
// values (one partial chunk) to 2048 (splits of whole chunks).
func TestRouterParts(t *testing.T) {
	k := setup(t)
	testRouter(t, k, func(s *vk.Sequence, ids, weights, logits, w, x vk.Binding, norm *RouterNorm, n, e, K, topK int, renorm bool) error {
		pb := buffer(t, k.RouterPartsBytes(n, e, K), nil)
		var g *vk.Binding
		if norm != nil {
			g = &norm.G
		}
		if err := k.RouterParts(s, whole(pb), w, x, g, n, e, K); err != nil {
			return err
		}
		s.Barrier()
		return k.RouteParts(s, ids, weights, logits, whole(pb), x, norm, n, e, K, topK, renorm)
	})
	if _, splits := k.routerSpan(37, 128, 2048); splits < 2 {
		t.Errorf("37 tokens over 128 experts of 2048 values: %d splits, want several (the cases above would not test them)", splits)
	}
	b := vk.Binding{}
	if err := k.RouteParts(nil, b, b, b, b, b, nil, 1, 4, 8, 5, true); err == nil {
		t.Error("top 5 of 4 experts recorded")
	}
	if err := k.RouterParts(nil, b, b, b, nil, 1, 4, 6); err == nil {
		t.Error("rows of 6 values recorded")
	}
}

// routerRec records a router over its bindings: Router, or RouterParts
// and RouteParts.
type routerRec func(s *vk.Sequence, ids, weights, logits, w, x vk.Binding, norm *RouterNorm, n, e, K, topK int, renorm bool) error

// testRouter runs rec on decode's few tokens and prefill's batches, with
// and without the norm, against checkRouter.
func testRouter(t *testing.T, k *Kernels, rec routerRec) {
	rng := rand.New(rand.NewPCG(21, 22))
	for _, c := range []struct{ e, k, n, K int }{{8, 2, 1, 256}, {128, 8, 3, 2048}, {7, 3, 2, 36}, {1, 1, 1, 4}, {300, 7, 2, 100}, {MaxExperts, 4, 1, 64}, {5, 5, 9, 12},
		// Prefill batches: 16 experts a workgroup, the last group partly
		// past E.
		{128, 8, 37, 2048}, {20, 3, 300, 64}, {MaxExperts, 8, 13, 16}} {
		for _, rms := range []bool{false, true} {
			renorm := c.e%2 == 0
			t.Run(fmt.Sprintf("e%d/k%d/n%d/K%d/rms=%v", c.e, c.k, c.n, c.K, rms), func(t *testing.T) {
				// Logits of a few units, as TestRoute's: far wider ones
				// leave every probability but the top one 0 in f32.
				w := normals(rng, c.e*c.K, 1.5/math.Sqrt(float64(c.K)))
				g := normals(rng, c.K, 1)
				wb, gb := floatBuffer(t, w), floatBuffer(t, g)
				xb, lb := buffer(t, f32(c.n*c.K), nil), buffer(t, f32(c.n*c.e), nil)
				ib, ob := buffer(t, f32(c.n*c.k), nil), buffer(t, f32(c.n*c.k), nil)
				var norm *RouterNorm
				if rms {
					norm = &RouterNorm{G: whole(gb), Eps: 1e-6}
				}
				s := kern.dev.NewSequence()
				defer s.Free()
				for r := range 3 {
					if r > 0 {
						s.Barrier()
					}
					if err := rec(s, whole(ib), whole(ob), whole(lb), whole(wb), whole(xb), norm, c.n, c.e, c.K, c.k, renorm); err != nil {
						t.Fatal(err)
					}
				}
				if err := s.End(); err != nil {
					t.Fatal(err)
				}
				// Fresh activations for each submission: a counter left
				// dirty by the one before routes early or never.
				for range 2 {
					x := normals(rng, c.n*c.K, 1)
					if err := xb.WriteF32(0, x); err != nil {
						t.Fatal(err)
					}
					if err := s.Run(); err != nil {
						t.Fatal(err)
					}
					checkRouter(t, w, x, g, rms, lb, ib, ob, c.n, c.e, c.K, c.k, renorm)
				}
			})
		}
	}
}

// checkRouter compares Router's logits with float64 products (of the RMS
// norm of x with weight g, with rms) and its ids and weights with
// moeref.Route of those logits.
func checkRouter(t *testing.T, w, x, g []float32, rms bool, lb, ib, ob *vk.Buffer, n, experts, K, topK int, renorm bool) {
	t.Helper()
	logits, ids, ws := read(t, lb, 0, n*experts), read(t, ib, 0, n*topK), read(t, ob, 0, n*topK)
	for i := range n {
		h := make([]float64, K)
		ss := 0.0
		for j, v := range x[i*K : (i+1)*K] {
			h[j] = float64(v)
			ss += float64(v) * float64(v)
		}
		if rms {
			inv := 1 / math.Sqrt(ss/float64(K)+1e-6)
			for j := range h {
				h[j] *= inv * float64(g[j])
			}
		}
		for e := range experts {
			want := 0.0
			for j, hv := range h {
				want += float64(w[e*K+j]) * hv
			}
			if got := float64(logits[i*experts+e]); math.Abs(got-want) > 1e-5*(1+math.Abs(want))*math.Sqrt(float64(K)) {
				t.Fatalf("token %d expert %d: logit %v, want %v", i, e, got, want)
			}
		}
		wantIDs, wantW := moeref.Route(logits[i*experts:(i+1)*experts], topK, renorm)
		for j := range topK {
			if got := ids[i*topK+j]; got != float32(wantIDs[j]) {
				t.Fatalf("token %d slot %d: expert %v, want %d (ids %v)", i, j, got, wantIDs[j], ids[i*topK:(i+1)*topK])
			}
			if got := float64(ws[i*topK+j]); math.Abs(got-wantW[j]) > 1e-6 {
				t.Fatalf("token %d slot %d: weight %v, want %v", i, j, got, wantW[j])
			}
		}
	}
}

// slotChoice routes slot s of an expert product's test to an expert.
type slotChoice struct {
	name   string
	choose func(r *rand.Rand, s int) int
}

// slotChoices are the expert products' routings among experts (5 or
// more): every expert chosen, one (4) chosen by every slot and the others
// by none, random choices, and an id out of range (100, clamped to the
// last expert) in every other slot.
func slotChoices(experts int) []slotChoice {
	return []slotChoice{
		{"all", func(_ *rand.Rand, s int) int { return s % experts }},
		{"one", func(*rand.Rand, int) int { return 4 }},
		{"random", func(r *rand.Rand, _ int) int { return r.IntN(experts) }},
		{"clamp", func(_ *rand.Rand, s int) int { return []int{1, 100}[s%2] }},
	}
}

// slotRows returns the slots of n tokens of topK each and the rows of x
// the expert products read: one per slot with perSlot, else one per token.
func slotRows(n, topK int, perSlot bool) (slots, xRows int) {
	if perSlot {
		return n * topK, n * topK
	}
	return n * topK, n
}

// TestMatVecID checks the expert products against float64 products of the
// dequantized experts for every weight type, with every expert chosen,
// one chosen by every slot (the others by none), random choices and an id
// out of range (clamped to the last expert); x per token and per slot;
// 1, 3 and 9 tokens of 2 slots; rows that leave the last workgroup partial;
// two shapes.
func TestMatVecID(t *testing.T) {
	k := setup(t)
	const experts, topK = 6, 2
	shapes := []MatVecShape{k.MatVec, {32, 3, 2, 0}}
	i := 0
	for _, qt := range WeightTypes {
		for _, c := range slotChoices(experts) {
			for _, perSlot := range []bool{false, true} {
				n := []int{1, 3, 9}[i%3]
				sh := shapes[i%len(shapes)]
				rows := []int{7, 33, 1}[i%3]
				K := kFor(qt)[i%2]
				i++
				t.Run(fmt.Sprintf("%s/%s/perslot=%v/n%d/%dx%d/%s", qt, c.name, perSlot, n, rows, K, sh), func(t *testing.T) {
					r := rand.New(rand.NewPCG(uint64(i), 13))
					raw, deq := quantized(t, r, qt, experts*rows, K)
					slots, xRows := slotRows(n, topK, perSlot)
					x := normals(r, xRows*K, 1)
					ids := make([]float32, slots)
					for s := range ids {
						ids[s] = float32(c.choose(r, s))
					}
					w := weightsAt(t, raw, 256)
					xb, ib := floatBuffer(t, x), floatBuffer(t, ids)
					db := buffer(t, f32(slots*rows), nil)
					run(t, func(s *vk.Sequence) error {
						return k.MatVecIDWith(s, whole(db), w, whole(xb), whole(ib), qt, slots, topK, xRows, experts, rows, K, sh)
					})
					want, scale := make([]float64, slots*rows), make([]float64, slots*rows)
					for s := range slots {
						e := min(int(ids[s]), experts-1)
						xr := s
						if !perSlot {
							xr = s / topK
						}
						w1, s1 := matRef(deq[e*rows*K:(e+1)*rows*K], x[xr*K:(xr+1)*K], 1, rows, K)
						copy(want[s*rows:], w1)
						copy(scale[s*rows:], s1)
					}
					compare(t, "dst", read(t, db, 0, slots*rows), want, scale, dotTol(K))
				})
			}
		}
	}
	if err := k.MatVecID(nil, vk.Binding{}, vk.Binding{}, vk.Binding{}, vk.Binding{}, quant.F32, 4, 2, 3, 2, 1, 4); err == nil {
		t.Error("3 x rows for 4 slots of 2 recorded")
	}
}

// TestMatVecIDSum checks the summed expert product against float64: each
// token's slots' products by the dequantized experts, weighted and added
// to the residual. Every weight type; 1 to 8 tokens of k = 1, 2 and 8
// slots among 9 experts; every expert chosen, one taking all, random
// choices and an id out of range (clamped); x per token and per slot; dst
// the residual and a buffer of its own; rows that leave the last
// workgroup partial; two shapes; x in f32 and, for the quantized types, in
// 8 bits (against the rounded values).
func TestMatVecIDSum(t *testing.T) {
	k := setup(t)
	const experts = 9
	choices := slotChoices(experts)
	i := 0
	for _, qt := range WeightTypes {
		for _, q8 := range []bool{false, true} {
			if q8 && (!HasQ8(qt) || !k.info.IntegerDot) {
				continue // the refusal: TestMatVecIDGLU
			}
			for _, topK := range []int{1, 2, 8} {
				c := choices[i%len(choices)]
				n := 1 + (i*3)%8
				perSlot, alias := i%2 == 0, (i+i/3)%2 == 0
				rows := []int{7, 33, 1, 12}[i%4]
				K := kFor(qt)[i%2]
				sh := []MatVecShape{k.IDSumShape(qt, q8, rows, K, topK), {32, 3, 2, 0}}[i%2]
				i++
				t.Run(fmt.Sprintf("%s/q8=%v/k%d/%s/perslot=%v/alias=%v/n%d/%dx%d/%s", qt, q8, topK, c.name, perSlot, alias, n, rows, K, sh), func(t *testing.T) {
					r := rand.New(rand.NewPCG(uint64(i), 17))
					raw, deq := quantized(t, r, qt, experts*rows, K)
					slots, xRows := slotRows(n, topK, perSlot)
					xb, x := stackX(t, k, r, xRows, K, q8)
					res := normals(r, n*rows, 3)
					ids, mix := make([]float32, slots), make([]float32, slots)
					for s := range ids {
						ids[s] = float32(c.choose(r, s))
						mix[s] = r.Float32()
					}
					w := weightsAt(t, raw, 256)
					ib, mb, rb := floatBuffer(t, ids), floatBuffer(t, mix), floatBuffer(t, res)
					db := rb
					if !alias {
						db = buffer(t, f32(n*rows), nil)
					}
					run(t, func(s *vk.Sequence) error {
						return k.MatVecIDSumWith(s, whole(db), w, xb, whole(ib), whole(mb), whole(rb),
							qt, n, topK, xRows, experts, rows, K, sh, q8)
					})
					// Each slot's dot product errs by up to dotTol(K) of its
					// sum |w*x|; weighting, the k-term sum and the residual
					// add round k+1 times more, relative to the weighted sums
					// of magnitudes and |r|.
					want, scale := make([]float64, n*rows), make([]float64, n*rows)
					for tok := range n {
						for row := range rows {
							v, a := float64(res[tok*rows+row]), math.Abs(float64(res[tok*rows+row]))
							for j := range topK {
								s := tok*topK + j
								e := min(int(ids[s]), experts-1)
								xr := tok
								if perSlot {
									xr = s
								}
								d, m := matRef(deq[(e*rows+row)*K:(e*rows+row+1)*K], x[xr*K:(xr+1)*K], 1, 1, K)
								v += float64(mix[s]) * d[0]
								a += float64(mix[s]) * m[0]
							}
							want[tok*rows+row], scale[tok*rows+row] = v, a
						}
					}
					compare(t, "dst", read(t, db, 0, n*rows), want, scale, dotTol(K)+float64(topK+1)*eps32)
				})
			}
		}
	}
	if err := k.MatVecIDSum(nil, vk.Binding{}, vk.Binding{}, vk.Binding{}, vk.Binding{}, vk.Binding{}, vk.Binding{}, quant.F32, 2, 2, 3, 2, 1, 4, false); err == nil {
		t.Error("3 x rows for 2 tokens of 2 slots recorded")
	}
}

// TestMatVecIDGLU checks the gated expert product against float64: each
// slot's gate and up products by its dequantized experts and act(gate)·up,
// silu and gelu. Every weight type; 1 to 8 tokens of k = 1, 2 and 8 slots
// among 9 experts (every expert chosen, one taking all, random, clamped);
// x per token and per slot; up's stack before or after gate's in the
// buffer; rows that leave the last workgroup partial; three shapes; x in
// f32 and, for the quantized types, in 8 bits (the integer dot products,
// against the rounded values; on a device without them, the refusal).
func TestMatVecIDGLU(t *testing.T) {
	k := setup(t)
	const experts = 9
	choices := slotChoices(experts)
	i := 0
	for _, qt := range WeightTypes {
		for _, q8 := range []bool{false, true} {
			if q8 && !HasQ8(qt) {
				continue
			}
			for _, topK := range []int{1, 2, 8} {
				c := choices[i%len(choices)]
				g := []GLU{SwiGLU, GeGLU}[(i/3+i/6)%2]
				n := 1 + (i*5)%8
				perSlot, upFirst := i%2 == 0, (i+i/3)%2 == 0
				rows := []int{7, 64, 1, 96, 32}[i%5]
				K := kFor(qt)[i%2]
				sh := []MatVecShape{k.IDGLUShape(q8, rows, K, topK), {32, 2, 2, 0}, {16, 6, 1, 0}, {32, 16, 1, 0}}[i%4]
				i++
				t.Run(fmt.Sprintf("%s/q8=%v/%s/k%d/%s/perslot=%v/upfirst=%v/n%d/%dx%d/%s", qt, q8, g, topK, c.name, perSlot, upFirst, n, rows, K, sh), func(t *testing.T) {
					r := rand.New(rand.NewPCG(uint64(i), 19))
					rawG, deqG := quantized(t, r, qt, experts*rows, K)
					rawU, deqU := quantized(t, r, qt, experts*rows, K)
					slots, xRows := slotRows(n, topK, perSlot)
					ids := make([]float32, slots)
					for s := range ids {
						ids[s] = float32(c.choose(r, s))
					}
					if q8 && !k.info.IntegerDot {
						xb := whole(buffer(t, Q8Bytes(xRows, K), nil))
						err := k.MatVecIDGLUWith(nil, g, xb, xb, xb, xb, xb, nil, qt, slots, topK, xRows, experts, rows, K, sh, q8)
						if err == nil || !strings.Contains(err.Error(), "integer dot product") {
							t.Fatalf("8-bit activations without the integer dot product: %v", err)
						}
						t.Logf("no integer dot product: %v", err)
						return
					}
					xb, x := stackX(t, k, r, xRows, K, q8)
					// Both stacks in one buffer, 16-byte aligned, 256 bytes in.
					first, second := pad4(rawG), pad4(rawU)
					if upFirst {
						first, second = second, first
					}
					off1 := int64(256)
					off2 := (off1 + int64(len(first)) + 15) / 16 * 16
					wb := buffer(t, off2+int64(len(second)), nil)
					if err := wb.Write(off1, first); err != nil {
						t.Fatal(err)
					}
					if err := wb.Write(off2, second); err != nil {
						t.Fatal(err)
					}
					wg, wu := vk.Binding{Buf: wb, Off: off1}, vk.Binding{Buf: wb, Off: off2}
					if upFirst {
						wg, wu = wu, wg
					}
					ib := floatBuffer(t, ids)
					db := buffer(t, f32(slots*rows), nil)
					// The q8 copy of the output where its blocks are whole;
					// recorded twice with a barrier between, as each token
					// replays it: the counters must be back at zero.
					var qb *vk.Binding
					if rows%32 == 0 && 32%(sh.Rows/2) == 0 {
						b := whole(buffer(t, Q8Bytes(slots, rows), nil))
						qb = &b
					}
					run(t, func(s *vk.Sequence) error {
						for i := range 2 {
							if i > 0 {
								s.Barrier()
							}
							if err := k.MatVecIDGLUWith(s, g, whole(db), wg, wu, xb, whole(ib), qb, qt, slots, topK, xRows, experts, rows, K, sh, q8); err != nil {
								return err
							}
						}
						return nil
					})
					want, tol := make([]float64, slots*rows), make([]float64, slots*rows)
					for s := range slots {
						e := min(int(ids[s]), experts-1)
						xr := s
						if !perSlot {
							xr = s / topK
						}
						xs := x[xr*K : (xr+1)*K]
						gate, gScale := matRef(deqG[e*rows*K:(e+1)*rows*K], xs, 1, rows, K)
						up, uScale := matRef(deqU[e*rows*K:(e+1)*rows*K], xs, 1, rows, K)
						for row := range rows {
							act, y := gluRef(g, gate[row])
							i := s*rows + row
							want[i] = act * up[row]
							// As TestMatVecStackGated: act'(g) is at most about 1.1
							// (silu) or 1.13 (gelu).
							tol[i] = dotTol(K)*(1.2*gScale[row]*math.Abs(up[row])+math.Abs(act)*uScale[row]) +
								1e-5*math.Abs(want[i])*max(1, math.Abs(y)/10) + 1e-30
						}
					}
					got := read(t, db, 0, slots*rows)
					compare(t, "act(gate)*up", got, want, tol, 1)
					if qb != nil {
						q8Values(t, readBytes(t, qb.Buf), got, slots, rows)
					}
				})
			}
		}
	}
	w := buffer(t, 1<<12, nil)
	other := buffer(t, 1<<12, nil)
	for name, rec := range map[string]func() error{
		"two buffers": func() error {
			return k.MatVecIDGLU(nil, SwiGLU, whole(w), whole(w), whole(other), whole(w), whole(w), nil, quant.F32, 2, 2, 1, 2, 4, 4, false)
		},
		"odd rows": func() error {
			return k.MatVecIDGLUWith(nil, SwiGLU, whole(w), whole(w), whole(w), whole(w), whole(w), nil, quant.F32, 2, 2, 1, 2, 4, 4, MatVecShape{32, 3, 1, 0}, false)
		},
		"unknown activation": func() error {
			return k.MatVecIDGLU(nil, GLU(7), whole(w), whole(w), whole(w), whole(w), whole(w), nil, quant.F32, 2, 2, 1, 2, 4, 4, false)
		},
		"q8 copy of partial blocks": func() error {
			q := whole(w)
			return k.MatVecIDGLU(nil, SwiGLU, whole(w), whole(w), whole(w), whole(w), whole(w), &q, quant.F32, 2, 2, 1, 2, 4, 4, false)
		},
		"8-bit activations with float weights": func() error {
			return k.MatVecIDGLU(nil, SwiGLU, whole(w), whole(w), whole(w), whole(w), whole(w), nil, quant.F32, 2, 2, 1, 2, 4, 32, true)
		},
	} {
		if err := rec(); err == nil {
			t.Errorf("%s: recorded", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

// TestMoESum checks moe_sum.comp against the formula in float64, with dst
// the residual and a buffer of its own.
func TestMoESum(t *testing.T) {
	k := setup(t)
	rng := rand.New(rand.NewPCG(14, 15))
	for _, c := range []struct{ n, k, cols int }{{1, 2, 7}, {3, 8, 33}, {9, 1, 257}} {
		for _, alias := range []bool{true, false} {
			t.Run(fmt.Sprintf("n%d/k%d/c%d/dst=r:%v", c.n, c.k, c.cols, alias), func(t *testing.T) {
				y, w, r := normals(rng, c.n*c.k*c.cols, 3), normals(rng, c.n*c.k, 1), normals(rng, c.n*c.cols, 5)
				yb, wb, rb := floatBuffer(t, y), floatBuffer(t, w), floatBuffer(t, r)
				db := rb
				if !alias {
					db = buffer(t, f32(c.n*c.cols), nil)
				}
				run(t, func(s *vk.Sequence) error {
					return k.MoESum(s, whole(db), whole(yb), whole(wb), whole(rb), c.n, c.cols, c.k)
				})
				want, scale := make([]float64, c.n*c.cols), make([]float64, c.n*c.cols)
				for i := range c.n {
					for col := range c.cols {
						v, a := float64(r[i*c.cols+col]), math.Abs(float64(r[i*c.cols+col]))
						for j := range c.k {
							p := float64(w[i*c.k+j]) * float64(y[(i*c.k+j)*c.cols+col])
							v += p
							a += math.Abs(p)
						}
						want[i*c.cols+col], scale[i*c.cols+col] = v, a
					}
				}
				compare(t, "dst", read(t, db, 0, c.n*c.cols), want, scale, float64(c.k+2)*eps32)
			})
		}
	}
}

// TestMoESort checks moe_sort.comp against PackByExpert's counting sort
// and its naive cut (the tile list): pair counts that are not multiples
// of the workgroup (1, 7, 255, 257, 1037, 4096), every expert chosen, most
// chosen by none, one taking all, MaxExperts, and ids out of range
// (clamped to the last expert); tiles of 64, 13 (not a power of two) and 1
// pair.
func TestMoESort(t *testing.T) {
	k := setup(t)
	rng := rand.New(rand.NewPCG(21, 22))
	for i, c := range []struct {
		name          string
		pairs, expert int
		choose        func(i int) int
	}{
		{"one pair", 1, 1, func(int) int { return 0 }},
		{"every expert", 7, 5, func(i int) int { return i % 5 }},
		{"every expert, one round and a lane", 257, 128, func(i int) int { return (i * 37) % 128 }},
		{"random 128", 4096, 128, func(int) int { return rng.IntN(128) }},
		{"one takes all", 1037, 16, func(int) int { return 9 }},
		{"none but two", 255, 128, func(i int) int { return []int{3, 77}[i%2] }},
		{"max experts", 296, MaxExperts, func(int) int { return rng.IntN(MaxExperts) }},
		{"out of range", 33, 6, func(i int) int { return []int{2, 100, -1}[i%3] }},
	} {
		height := []int{64, 13, 1}[i%3]
		t.Run(fmt.Sprintf("%s/tiles of %d", c.name, height), func(t *testing.T) {
			ids := make([]float32, c.pairs)
			want := make([]int, c.pairs)
			for i := range ids {
				e := c.choose(i)
				ids[i] = float32(e)
				want[i] = min(max(e, 0), c.expert-1)
			}
			ref, err := PackByExpert(want, c.expert, height, 1, true)
			if err != nil {
				t.Fatal(err)
			}
			words := MoESortWords(c.pairs, c.expert, height)
			if n := len(ref.Tiles); n > MoETiles(c.pairs, c.expert, height) {
				t.Fatalf("%d tiles, MoETiles bounds them at %d", n, MoETiles(c.pairs, c.expert, height))
			}
			ib := floatBuffer(t, ids)
			ob := buffer(t, f32(words), nil)
			run(t, func(s *vk.Sequence) error { return k.MoESort(s, whole(ob), whole(ib), c.pairs, c.expert, height) })
			got := read(t, ob, 0, words)
			word := func(j int) int { return int(math.Float32bits(got[j])) }
			// Each expert's run holds its pairs in whatever order the
			// scatter's atomics gave them: compared sorted.
			perm := make([]int, c.pairs)
			for j := range perm {
				perm[j] = word(c.expert + 1 + j)
			}
			for e := range c.expert {
				lo, hi := ref.Offsets[e], ref.Offsets[e+1]
				run := slices.Sorted(slices.Values(perm[lo:hi]))
				if !slices.Equal(run, ref.Perm[lo:hi]) {
					t.Fatalf("expert %d's run (positions %d..%d) holds pairs %v, want %v", e, lo, hi, run, ref.Perm[lo:hi])
				}
			}
			expect := append([]int{}, ref.Offsets...)
			expect = append(expect, len(ref.Tiles))
			for _, tl := range ref.Tiles {
				expect = append(expect, tl.Expert, tl.Start, tl.Rows)
			}
			for j, w := range expect {
				at := j
				if j > c.expert {
					at += c.pairs // past the pairs: the tile count and the tiles
				}
				if u := word(at); u != w {
					t.Fatalf("word %d (offsets 0..%d, then the tile count at %d and the tiles) is %d, want %d",
						at, c.expert, c.expert+1+c.pairs, u, w)
				}
			}
		})
	}
	if err := k.MoESort(nil, vk.Binding{}, vk.Binding{}, 4, MaxExperts+1, 64); err == nil {
		t.Error("more experts than moe_sort.comp holds recorded")
	}
	if err := k.MoESort(nil, vk.Binding{}, vk.Binding{}, 4, 8, 0); err == nil {
		t.Error("tiles of no pairs recorded")
	}
}
