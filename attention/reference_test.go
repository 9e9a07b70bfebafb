package attention

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/x448/float16"
)

func f16s(v ...float32) []uint16 {
	h := make([]uint16, len(v))
	for i, x := range v {
		h[i] = float16.Fromfloat32(x).Bits()
	}
	return h
}

func near(t *testing.T, what string, got []float64, want ...float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if math.Abs(got[i]-want[i]) > 1e-12 {
			t.Errorf("%s: [%d] = %.15g, want %.15g", what, i, got[i], want[i])
		}
	}
}

// Hand-computed cases: head dim 2, keys k0 = (0, 0) and k1 = (1, 0), values
// v0 = (1, 0) and v1 = (0, 2), query (1, 0) at scale 1: scores 0 and 1, so
// the second row (which sees both keys) is (1, 2e) / (1 + e).
func TestReference(t *testing.T) {
	e := math.E
	both := []float64{1 / (1 + e), 2 * e / (1 + e)}
	base := Problem{Queries: 2, Heads: 1, KVHeads: 1, HeadDim: 2, Scale: 1,
		Q: []float32{1, 0, 1, 0}, K: f16s(0, 0, 1, 0), V: f16s(1, 0, 0, 2)}

	// Causal: row 0 (position 0) sees only key 0.
	got, err := Reference(base)
	if err != nil {
		t.Fatal(err)
	}
	near(t, "causal", got, append([]float64{1, 0}, both...)...)

	// GQA: two q-heads read the one KV head; the second query head asks for
	// k0 only (score 0 vs -1 after the scale), a weighting of 1 : 1/e.
	g := base
	g.Queries, g.Heads, g.Pos = 1, 2, 1
	g.Q = []float32{1, 0, -1, 0}
	if got, err = Reference(g); err != nil {
		t.Fatal(err)
	}
	near(t, "gqa", got, append(both, 1/(1+1/e), 2/e/(1+1/e))...)

	// Additive mask: -Inf hides key 1 from row 1; a bias of ln 3 on key 0
	// triples its weight. Row 0 is fully masked and outputs zeros.
	m := base
	m.MaskStride = 2
	m.Mask = []float32{float32(math.Inf(-1)), 0, float32(math.Log(3)), float32(math.Inf(-1))}
	if got, err = Reference(m); err != nil {
		t.Fatal(err)
	}
	near(t, "mask", got, 0, 0, 1, 0)
	m.Mask[3] = 0
	if got, err = Reference(m); err != nil {
		t.Fatal(err)
	}
	w := float64(float32(math.Log(3))) // the mask is float32
	near(t, "bias", got[2:], math.Exp(w)/(math.Exp(w)+e), 2*e/(math.Exp(w)+e))

	// Scale multiplies q·k before the mask.
	s := base
	s.Scale = 2
	if got, err = Reference(s); err != nil {
		t.Fatal(err)
	}
	near(t, "scale", got[2:], 1/(1+e*e), 2*e*e/(1+e*e))
}

func TestReferenceRejects(t *testing.T) {
	ok := Problem{Queries: 1, Heads: 1, KVHeads: 1, HeadDim: 2, Scale: 1,
		Q: []float32{1, 0}, K: f16s(0, 0), V: f16s(0, 0)}
	if _, err := Reference(ok); err != nil {
		t.Fatal(err)
	}
	for name, edit := range map[string]func(*Problem){
		"short q":     func(p *Problem) { p.Q = p.Q[:1] },
		"short cache": func(p *Problem) { p.Pos = 1 },
		"heads":       func(p *Problem) { p.Heads = 3; p.KVHeads = 2 },
		"mask stride": func(p *Problem) { p.Mask = []float32{0}; p.MaskStride = 0 },
		"window":      func(p *Problem) { p.Window = -1 },
		"short ring":  func(p *Problem) { p.Queries = 2; p.Q = append(p.Q, 1, 0); p.Slots = 1 },
		"ring cache":  func(p *Problem) { p.Slots = 2 },
	} {
		p := ok
		edit(&p)
		if _, err := Reference(p); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestRelErr(t *testing.T) {
	want := []float64{1, -2, 0, 0}
	if e := RelErr([]float32{1, -2, 0, 0}, want, 2); e != 0 {
		t.Errorf("equal: %g", e)
	}
	// Row 0 off by 0.002 against a scale of 2; row 1 (all zero) absolutely.
	if e := RelErr([]float32{1, -2.002, 0, 0.0005}, want, 2); math.Abs(e-0.001) > 1e-7 {
		t.Errorf("got %g, want 0.001", e)
	}
	if e := RelErr([]float32{float32(math.NaN()), -2, 0, 0}, want, 2); !math.IsInf(e, 1) {
		t.Errorf("NaN: %g, want +Inf", e)
	}
	if e := RelErr([]float32{1}, want, 2); !math.IsInf(e, 1) {
		t.Errorf("length mismatch: %g, want +Inf", e)
	}
}

// TestReferenceWindow checks windows and rings against the brute-force
// formula: the same keys in a cache of every position, with an additive
// -Inf on each key the window hides (Pos+i - k >= Window) or the ring no
// longer holds (k < Pos+Queries-Slots), and the random mask moved from
// ring columns to positions.
func TestReferenceWindow(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 18))
	for _, c := range []struct{ pos, queries, window, slots int }{
		{0, 5, 1, 0},
		{9, 1, 1, 0},
		{9, 1, 4, 4},     // decode in a ring of exactly the window
		{20, 6, 3, 8},    // the ring of Window+Queries-1 slots, wrapped twice
		{37, 7, 5, 16},   // a larger ring, the batch straddling the wrap (45 % 16)
		{3, 4, 100, 0},   // a window larger than the depth
		{50, 3, 100, 60}, // ... in a ring that has wrapped
		{30, 9, 0, 32},   // no window: a ring holding the 32 latest positions
		{10, 3, 0, 0},
	} {
		for _, masked := range []bool{false, true} {
			t.Run(fmt.Sprintf("pos%d/q%d/w%d/slots%d/mask=%v", c.pos, c.queries, c.window, c.slots, masked), func(t *testing.T) {
				const heads, kvHeads, d = 4, 2, 8
				end := c.pos + c.queries
				rows := c.slots
				if rows == 0 {
					rows = end
				}
				q := make([]float32, c.queries*heads*d)
				for i := range q {
					q[i] = float32(4*r.Float64() - 2)
				}
				// Every position's key and value, and the ring after they
				// were stored in order: a row holds its latest position.
				kvd := kvHeads * d
				keys, vals := make([]float32, end*kvd), make([]float32, end*kvd)
				for i := range keys {
					keys[i], vals[i] = float32(2*r.Float64()-1), float32(2*r.Float64()-1)
				}
				ring := Problem{Queries: c.queries, Heads: heads, KVHeads: kvHeads, HeadDim: d, Pos: c.pos,
					Window: c.window, Slots: c.slots, Scale: 0.5, Q: q, K: make([]uint16, rows*kvd), V: make([]uint16, rows*kvd)}
				for k := range end {
					copy(ring.K[(k%rows)*kvd:], f16s(keys[k*kvd:(k+1)*kvd]...))
					copy(ring.V[(k%rows)*kvd:], f16s(vals[k*kvd:(k+1)*kvd]...))
				}
				flat := Problem{Queries: c.queries, Heads: heads, KVHeads: kvHeads, HeadDim: d, Pos: c.pos,
					Scale: 0.5, Q: q, K: f16s(keys...), V: f16s(vals...), Mask: make([]float32, c.queries*end), MaskStride: end}
				if masked {
					ring.Mask, ring.MaskStride = make([]float32, c.queries*rows), rows
					for i := range ring.Mask {
						ring.Mask[i] = float32(r.Float64() - 0.5)
						if r.IntN(4) == 0 {
							ring.Mask[i] = float32(math.Inf(-1))
						}
					}
				}
				seen := 0
				for i := range c.queries {
					for k := range end {
						p := c.pos + i
						switch {
						case k > p, c.window > 0 && p-k >= c.window, k < end-rows:
							flat.Mask[i*end+k] = float32(math.Inf(-1))
						case masked:
							flat.Mask[i*end+k] = ring.Mask[i*rows+k%rows]
							seen++
						default:
							seen++
						}
					}
				}
				if seen == 0 {
					t.Fatal("every key is hidden: nothing compared")
				}
				got, err := Reference(ring)
				if err != nil {
					t.Fatal(err)
				}
				want, err := Reference(flat)
				if err != nil {
					t.Fatal(err)
				}
				near(t, "ring", got, want...)
			})
		}
	}
}

// TestReferenceWindowOne: with a window of 1 a row sees only its own key,
// so it outputs its own value row exactly, whatever its scores.
func TestReferenceWindowOne(t *testing.T) {
	p := Problem{Queries: 3, Heads: 1, KVHeads: 1, HeadDim: 2, Pos: 4, Window: 1, Slots: 3, Scale: 1,
		Q: []float32{5, -1, 0, 3, 2, 2},
		// Positions 4, 5, 6 in rows 1, 2, 0.
		K: f16s(1, 1, 2, 2, 3, 3), V: f16s(60, 61, 40, 41, 50, 51)}
	got, err := Reference(p)
	if err != nil {
		t.Fatal(err)
	}
	near(t, "window 1", got, 40, 41, 50, 51, 60, 61)
}
