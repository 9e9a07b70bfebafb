// Package golden checks an engine against llama.cpp's recorded outputs in
// ../shared/testdata/golden (prompt tokens, top-10 logits at every prompt
// position and a 48-token greedy continuation), with the tolerances of
// golden/README.md. The CPU and Vulkan backends' tests both use it.
package golden

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vkinfer/vkinfer/backend"
	"github.com/vkinfer/vkinfer/gguf"
	"github.com/vkinfer/vkinfer/internal/fixtures"
	"github.com/vkinfer/vkinfer/model"
	"github.com/vkinfer/vkinfer/model/sample"
)

// run is one llama.cpp run (see ../shared/testdata/golden/README.md).
type run struct {
	Model     string                     `json:"model"`
	Prompt    string                     `json:"prompt"`
	AddBOS    bool                       `json:"add_bos"`
	Tokens    []int32                    `json:"tokens"`
	Positions []struct{ Top []topEntry } `json:"positions"`
	Greedy    []int32                    `json:"greedy"`
	GreedyTop [][]topEntry               `json:"greedy_top"`
}

// topEntry is [id, logit, piece].
type topEntry struct {
	ID    int32
	Logit float64
}

func (e *topEntry) UnmarshalJSON(b []byte) error {
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	if err := json.Unmarshal(raw[0], &e.ID); err != nil {
		return err
	}
	return json.Unmarshal(raw[1], &e.Logit)
}

// Tolerance is what golden/README.md promises a correct float32 engine meets.
type Tolerance struct {
	Logit     float64 // absolute logit difference
	FullTop10 bool    // F32/F16: whole top-10 order; quantized: top-1 only
}

func loadGolden(t *testing.T, name string) run {
	t.Helper()
	b, err := os.ReadFile(fixtures.Path(t, "golden", name))
	if err != nil {
		t.Fatal(err)
	}
	var g run
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return g
}

// modelFile maps a golden file's model name to its GGUF path.
func modelFile(t *testing.T, name string) string {
	t.Helper()
	if strings.Contains(name, "pad256") {
		return fixtures.Path(t, "derived", filepath.Base(name))
	}
	return fixtures.Path(t, filepath.Base(name))
}

// Files lists the golden runs, each with its tolerance.
func Files(t *testing.T) map[string]Tolerance {
	t.Helper()
	matches, err := filepath.Glob(filepath.Join(filepath.Dir(fixtures.Path(t, "golden", "README.md")), "*.json"))
	if err != nil || len(matches) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	out := map[string]Tolerance{}
	for _, m := range matches {
		name := filepath.Base(m)
		if strings.Contains(name, ".cpu-") {
			out[name] = Tolerance{Logit: 1e-3, FullTop10: true}
		} else {
			out[name] = Tolerance{Logit: 1e-2}
		}
	}
	return out
}

// Check runs the golden file name through a model loaded on be.
func Check(t *testing.T, be backend.Backend, name string, tol Tolerance) {
	t.Helper()
	g := loadGolden(t, name)
	f, err := gguf.Open(modelFile(t, g.Model))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := model.Load(f, be, model.Options{Context: 256})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()

	toks := m.Tok.Encode(g.Prompt, g.AddBOS, false)
	if !slices.Equal(toks, g.Tokens) {
		t.Fatalf("prompt tokens %v, llama.cpp %v", toks, g.Tokens)
	}
	logits, err := m.Forward(toks, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	V := m.HP.Vocab
	for i, p := range g.Positions {
		compareTop(t, "prompt position", i, logits[i*V:(i+1)*V], p.Top, tol)
	}
	last := append([]float32(nil), logits[(len(toks)-1)*V:]...)
	pos := len(toks)
	for step, want := range g.Greedy {
		top := g.GreedyTop[step]
		compareTop(t, "greedy step", step, last, top, tol)
		got := sample.Argmax(last)
		if got != want {
			// Quantized models may diverge once llama.cpp's own top-2 are within
			// the tolerance (golden/README.md); F32 models never may.
			if !tol.FullTop10 && len(top) > 1 && top[0].Logit-top[1].Logit < tol.Logit {
				t.Logf("greedy step %d: %d vs llama.cpp %d at a near-tie (%.4f vs %.4f); stopping the comparison", step, got, want, top[0].Logit, top[1].Logit)
				return
			}
			t.Fatalf("greedy step %d: token %d, llama.cpp %d", step, got, want)
		}
		out, err := m.Forward([]int32{want}, pos, false)
		if err != nil {
			t.Fatal(err)
		}
		last = append(last[:0], out...)
		pos++
	}
}

// compareTop checks our logits against llama.cpp's top-10 list.
func compareTop(t *testing.T, what string, i int, logits []float32, top []topEntry, tol Tolerance) {
	t.Helper()
	for _, e := range top {
		if d := math.Abs(float64(logits[e.ID]) - e.Logit); d > tol.Logit {
			t.Fatalf("%s %d: logit of token %d is %.5f, llama.cpp %.5f (|diff| %.2g > %.0g)", what, i, e.ID, logits[e.ID], e.Logit, d, tol.Logit)
		}
	}
	if got := sample.Argmax(logits); got != top[0].ID && top[0].Logit-top[1].Logit > tol.Logit {
		t.Fatalf("%s %d: top-1 is %d, llama.cpp %d", what, i, got, top[0].ID)
	}
	if !tol.FullTop10 {
		return
	}
	// Where llama.cpp's neighbours differ by more than the tolerance, ours must be in the same order.
	for k := 1; k < len(top); k++ {
		a, b := top[k-1], top[k]
		if a.Logit-b.Logit > tol.Logit && logits[a.ID] <= logits[b.ID] {
			t.Fatalf("%s %d: tokens %d and %d out of llama.cpp's order", what, i, a.ID, b.ID)
		}
	}
}
