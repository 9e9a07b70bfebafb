package attention

import (
	"math"
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
