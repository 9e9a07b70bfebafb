package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/vkinfer/vkinfer/backend"
	"github.com/vkinfer/vkinfer/internal/moeref"
	"github.com/vkinfer/vkinfer/quant"
)

// identity returns the e × e identity matrix as F32 weights: a router
// whose logits are its input, exactly.
func identity(t *testing.T, b *Backend, e int) backend.Tensor {
	v := make([]float32, e*e)
	for i := range e {
		v[i*e+i] = 1
	}
	return f32Weight(t, b, e, e, v)
}

// route runs Route on logits (n rows of e, through an identity router) and
// returns ids and weights.
func route(t *testing.T, logits []float32, n, e, k int, norm bool) (ids, w []float32) {
	t.Helper()
	b := newBackend(t)
	table := f32Weight(t, b, n, e, logits)
	eye := identity(t, b, e)
	out := runOnce(t, b, n, 2*n*k, func(o backend.Ops) {
		x, l, id, wt := o.Tensor(n, e), o.Tensor(n, e), o.Tensor(n, k), o.Tensor(n, k)
		o.Embed(x, table)
		o.Route(id, wt, l, eye, x, k, norm)
		o.Output(id)
		o.Output(wt)
	})
	return out[:n*k], out[n*k:]
}

// TestRoute checks softmax, top-k and renormalisation against the float64
// reference on random logits (Qwen3-30B-A3B's 128 experts, 8 used; the
// tiny model's 8 and 2; every expert used; odd counts), with and without
// renormalisation, and one expert far ahead of the rest, whose runners-up
// all have probability 0 and are taken in index order.
func TestRoute(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, c := range []struct{ e, k int }{{8, 2}, {128, 8}, {7, 3}, {5, 5}, {1, 1}} {
		for _, norm := range []bool{true, false} {
			t.Run(fmt.Sprintf("e%d/k%d/norm=%v", c.e, c.k, norm), func(t *testing.T) {
				const n = 7
				logits := make([]float32, n*c.e)
				for i := range logits {
					logits[i] = float32(rng.NormFloat64() * 3)
				}
				// Row 6: expert e-1 takes everything.
				for e := range c.e {
					logits[6*c.e+e] = 0
				}
				logits[6*c.e+c.e-1] = 1000
				ids, w := route(t, logits, n, c.e, c.k, norm)
				for i := range n {
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
}

// expertWeight places e experts of rows×cols random values in type typ as
// one weight of e·rows rows and returns it with its dequantized values.
func expertWeight(t *testing.T, b *Backend, rng *rand.Rand, typ quant.Type, e, rows, cols int) (backend.Tensor, []float32) {
	t.Helper()
	v := make([]float32, e*rows*cols)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	raw, err := quant.Quantize(typ, v)
	if err != nil {
		t.Fatal(err)
	}
	if err := quant.Dequantize(typ, raw, v); err != nil {
		t.Fatal(err)
	}
	w, err := b.Weight("experts", typ, e*rows, cols, raw)
	if err != nil {
		t.Fatal(err)
	}
	return w, v
}

// TestMatMulID checks the expert products against float64 dot products
// of the dequantized experts, with every expert chosen, most chosen by
// nobody, one chosen by every token, and random choices; with one input
// per token and one per slot; in F32, Q8_0, Q4_K and Q6_K.
func TestMatMulID(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const e, k = 6, 2
	choices := map[string]func(n, i int) []int{
		"all":    func(n, i int) []int { return []int{(2 * i) % e, (2*i + 1) % e} },
		"one":    func(n, i int) []int { return []int{4, (i % 2) * 5} }, // 4 takes all; 1, 2, 3 none
		"random": func(n, i int) []int { p := rng.Perm(e); return p[:k] },
	}
	for _, typ := range []quant.Type{quant.F32, quant.Q8_0, quant.Q4_K, quant.Q6_K} {
		for name, choose := range choices {
			for _, perSlot := range []bool{false, true} {
				for _, n := range []int{1, 3, 8} {
					t.Run(fmt.Sprintf("%s/%s/perslot=%v/n%d", typ, name, perSlot, n), func(t *testing.T) {
						const rows, cols = 5, 256
						b := newBackend(t)
						w, wv := expertWeight(t, b, rng, typ, e, rows, cols)
						eye := identity(t, b, e)
						// Logits that make Route choose the listed experts in order.
						logits := make([]float32, n*e)
						want := make([][]int, n)
						for i := range n {
							want[i] = choose(n, i)
							for j, ex := range want[i] {
								logits[i*e+ex] = float32(40 - 10*j)
							}
						}
						xRows := n
						if perSlot {
							xRows = n * k
						}
						_, xv := randTable(t, b, rng, xRows, cols, 1)
						out := runOnce(t, b, n, n*k*rows, func(o backend.Ops) {
							// Filled at record time: the program has n
							// tokens, and x n·k rows where perSlot.
							l, id, wt, x := o.Tensor(n, e), o.Tensor(n, k), o.Tensor(n, k), o.Tensor(xRows, cols)
							copy(x.(*tensor).data, xv)
							lx := o.Tensor(n, e)
							copy(lx.(*tensor).data, logits)
							o.Route(id, wt, l, eye, lx, k, true)
							d := o.Tensor(n*k, rows)
							o.MatMulID(d, w, x, id)
							o.Output(d)
						})
						for i := range n {
							for j, ex := range want[i] {
								in := xv[i*cols : (i+1)*cols]
								if perSlot {
									in = xv[(i*k+j)*cols : (i*k+j+1)*cols]
								}
								for r := range rows {
									wr := wv[(ex*rows+r)*cols : (ex*rows+r+1)*cols]
									var ref float64
									for c := range cols {
										ref += float64(wr[c]) * float64(in[c])
									}
									if got := float64(out[(i*k+j)*rows+r]); math.Abs(got-ref) > 1e-4*max(1, math.Abs(ref)) {
										t.Fatalf("token %d slot %d (expert %d) row %d: %v, want %v", i, j, ex, r, got, ref)
									}
								}
							}
						}
					})
				}
			}
		}
	}
}

// TestMoESum checks the mixing and the residual add against the formula in
// llama.cpp's order, bit for bit, with dst the residual and a tensor of
// its own.
func TestMoESum(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, c := range []struct{ n, k, cols int }{{1, 2, 7}, {3, 8, 33}, {8, 1, 256}} {
		for _, alias := range []bool{true, false} {
			t.Run(fmt.Sprintf("n%d/k%d/c%d/dst=r:%v", c.n, c.k, c.cols, alias), func(t *testing.T) {
				b := newBackend(t)
				yt, yv := randTable(t, b, rng, c.n*c.k, c.cols, 3)
				wt, wv := randTable(t, b, rng, c.n, c.k, 1)
				rt, rv := randTable(t, b, rng, c.n, c.cols, 5)
				out := runOnce(t, b, c.n, c.n*c.cols, func(o backend.Ops) {
					y, w, r := rows(o, yt), rows(o, wt), rows(o, rt)
					dst := r
					if !alias {
						dst = o.Tensor(c.n, c.cols)
					}
					o.MoESum(dst, y, w, r)
					o.Output(dst)
				})
				for i := range c.n {
					for col := range c.cols {
						var s float32
						for j := range c.k {
							s += float32(wv[i*c.k+j] * yv[(i*c.k+j)*c.cols+col])
						}
						if want, got := s+rv[i*c.cols+col], out[i*c.cols+col]; got != want {
							t.Fatalf("row %d col %d: %v, want %v", i, col, got, want)
						}
					}
				}
			})
		}
	}
}

// TestMoERecordErrors checks that MatMulID refuses ids Route did not
// write and a weight of another number of experts than Route chose among.
func TestMoERecordErrors(t *testing.T) {
	b := newBackend(t)
	w := f32Weight(t, b, 4*3, 8, make([]float32, 4*3*8))
	eye5 := identity(t, b, 5)
	for name, build := range map[string]func(o backend.Ops){
		"ids not from Route": func(o backend.Ops) { o.MatMulID(o.Tensor(2, 3), w, o.Tensor(1, 8), o.Tensor(1, 2)) },
		"5 experts routed, 4 held": func(o backend.Ops) {
			id := o.Tensor(1, 2)
			o.Route(id, o.Tensor(1, 2), o.Tensor(1, 5), eye5, o.Tensor(1, 5), 2, true)
			o.MatMulID(o.Tensor(2, 3), w, o.Tensor(1, 8), id)
		},
		"k beyond the experts": func(o backend.Ops) {
			o.Route(o.Tensor(1, 6), o.Tensor(1, 6), o.Tensor(1, 5), eye5, o.Tensor(1, 5), 6, true)
		},
	} {
		if _, err := b.Record(1, build); err == nil || !(strings.Contains(err.Error(), "mul_mat_id") || strings.Contains(err.Error(), "route")) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
