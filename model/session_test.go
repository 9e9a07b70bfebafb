package model_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/vkinfer/vkinfer/backend"
	"github.com/vkinfer/vkinfer/backend/cpu"
	"github.com/vkinfer/vkinfer/gguf"
	"github.com/vkinfer/vkinfer/internal/fixtures"
	"github.com/vkinfer/vkinfer/model"
	"github.com/vkinfer/vkinfer/model/sample"
)

// sessionTokens are n token ids inside every tiny model's vocabulary; seed
// varies them.
func sessionTokens(n, seed int) []int32 {
	toks := make([]int32, n)
	for i := range toks {
		toks[i] = int32(3 + (i*37+seed*101)%500)
	}
	return toks
}

// loadArch loads a model of the shared arch fixtures on be.
func loadArch(t *testing.T, name string, be backend.Backend, o model.Options) *model.Model {
	t.Helper()
	f, err := gguf.Open(fixtures.Path(t, "arch", name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	m, err := model.Load(f, be, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

// closeLogits fails t when got and want differ by more than tol times the
// largest |want|.
func closeLogits(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d logits, want %d", what, len(got), len(want))
	}
	scale := 0.0
	for _, w := range want {
		scale = max(scale, math.Abs(float64(w)))
	}
	for i := range want {
		if d := math.Abs(float64(got[i] - want[i])); d > tol*scale {
			t.Fatalf("%s: logit %d is %v, a fresh evaluation gives %v (|Δ| %.3g > %.3g)", what, i, got[i], want[i], d, tol*scale)
		}
	}
}

// sessionStep is one Eval of a session test: the tokens to hold, and how
// many of them the session must reuse.
type sessionStep struct {
	what   string
	tokens []int32
	reused int
}

// runSession Evals each step on one session of m and checks the reuse,
// the tokens held and the logits against a fresh evaluation of the same
// tokens (a new session from an empty cache, run first).
func runSession(t *testing.T, m *model.Model, steps []sessionStep, tol float64) {
	t.Helper()
	want := make([][]float32, len(steps))
	for i, st := range steps {
		logits, reused, err := m.NewSession().Eval(st.tokens)
		if err != nil || reused != 0 {
			t.Fatalf("%s: fresh evaluation: reused %d, %v", st.what, reused, err)
		}
		want[i] = slices.Clone(logits)
	}
	s := m.NewSession()
	for i, st := range steps {
		got, reused, err := s.Eval(st.tokens)
		if err != nil {
			t.Fatalf("%s: %v", st.what, err)
		}
		if reused != st.reused {
			t.Errorf("%s: reused %d tokens, want %d", st.what, reused, st.reused)
		}
		if !slices.Equal(s.Tokens(), st.tokens) {
			t.Errorf("%s: the session holds %v, want %v", st.what, s.Tokens(), st.tokens)
		}
		closeLogits(t, st.what, got, want[i], tol)
	}
}

// cat joins token slices into a new one.
func cat(parts ...[]int32) []int32 { return slices.Concat(parts...) }

// prefixSteps: a conversation's evaluations on a model without rings. Each
// keeps the longest common prefix, and at least the last token runs.
func prefixSteps() []sessionStep {
	a, b, c := sessionTokens(30, 1), sessionTokens(12, 2), sessionTokens(9, 3)
	return []sessionStep{
		{"first", a, 0},
		{"extended", cat(a, b), 30},
		{"the same again", cat(a, b), 41},
		{"rolled back and changed", cat(a[:20], c), 20},
		{"a different start", cat(c, a), 0},
		{"a prefix of what is held", c[:5], 4},
	}
}

// TestSessionReuse: on the CPU backend, a session's logits after reusing a
// prefix equal a fresh evaluation's, on models with global attention only.
func TestSessionReuse(t *testing.T) {
	for _, name := range []string{"tiny-qwen3.gguf", "tiny-llama31-q4_k_m.gguf"} {
		t.Run(name, func(t *testing.T) {
			m := loadArch(t, name, cpu.New(2), model.Options{Context: 64, UBatch: 16})
			runSession(t, m, prefixSteps(), 1e-5)
		})
	}
}

// ringSteps: evaluations on tiny-gemma3 in ubatches of 3, whose sliding
// layers (window 8) keep rings of 10 slots.
func ringSteps() []sessionStep {
	a, b, c := sessionTokens(40, 1), sessionTokens(6, 2), sessionTokens(5, 3)
	return []sessionStep{
		{"first", a, 0},
		// Keeping 38 reads positions 31…37; the ring holds 30…39.
		{"the last two tokens changed", cat(a[:38], b), 38},
		// Positions 38…43 overwrote the slots of 28…33: keeping 36 needs
		// 29…35, so 2 tokens back is one too far now.
		{"two back again", cat(a[:36], c), 0},
		{"extended", cat(a[:36], c, b), 41},
		{"rolled back past the rings", cat(a[:25], b), 0},
	}
}

// TestSessionRings: tiny-gemma3 slides a window of 8 on 5 of its 6 layers;
// with ubatches of 3 they keep rings of 10 slots. Rolling back a little
// reuses the prefix; rolling back past what the rings still hold
// re-evaluates everything. The last check shows why: evaluating from the
// kept prefix over the overwritten ring gives other logits.
func TestSessionRings(t *testing.T) {
	m := loadArch(t, "tiny-gemma3.gguf", cpu.New(2), model.Options{Context: 64, UBatch: 3})
	if m.Cache.Window(0) != 8 || m.Cache.Slots(0) != 10 {
		t.Fatalf("tiny-gemma3: layer 0 has window %d and %d slots, want 8 and 10", m.Cache.Window(0), m.Cache.Slots(0))
	}
	runSession(t, m, ringSteps(), 1e-5)

	// The fallback matters: after 43 tokens the rings hold positions
	// 33…42, not 18…24 that tokens evaluated at 25 read.
	a, b, c := sessionTokens(40, 1), sessionTokens(6, 2), sessionTokens(5, 3)
	toks := cat(a[:25], c)
	want, _, err := m.NewSession().Eval(toks)
	if err != nil {
		t.Fatal(err)
	}
	want = slices.Clone(want)
	if _, err := m.Forward(cat(a[:25], b, b, b), 0, false); err != nil {
		t.Fatal(err)
	}
	stale, err := m.Forward(c, 25, false)
	if err != nil {
		t.Fatal(err)
	}
	same := true
	for i := range want {
		if math.Abs(float64(stale[i]-want[i])) > 1e-3 {
			same = false
			break
		}
	}
	if same {
		t.Error("evaluating over an overwritten ring gave the fresh logits: the test cannot tell a wrong reuse")
	}
}

// TestSessionContext: tokens beyond the context are refused with
// ErrContextFull and the session keeps what it held; Generate refuses a
// prompt plus -n that does not fit.
func TestSessionContext(t *testing.T) {
	m := loadArch(t, "tiny-qwen3.gguf", cpu.New(2), model.Options{Context: 32})
	s := m.NewSession()
	a := sessionTokens(20, 1)
	if _, _, err := s.Eval(a); err != nil {
		t.Fatal(err)
	}
	_, _, err := s.Eval(cat(a, sessionTokens(13, 2)))
	if !errors.Is(err, model.ErrContextFull) {
		t.Fatalf("33 tokens in a context of 32: %v, want ErrContextFull", err)
	}
	if !slices.Equal(s.Tokens(), a) {
		t.Errorf("after the refusal the session holds %d tokens, want its 20", len(s.Tokens()))
	}
	_, err = s.Generate(context.Background(), a, model.GenOptions{N: 13}, sample.New(sample.Params{}), func(int32) error { return nil })
	if !errors.Is(err, model.ErrContextFull) {
		t.Errorf("Generate of 20+13 tokens in a context of 32: %v, want ErrContextFull", err)
	}
	if _, reused, err := s.Eval(a); err != nil || reused != 19 {
		t.Errorf("Eval of what is held: reused %d, %v", reused, err)
	}
	// Another session, or a bare Forward, takes the cache over.
	other := m.NewSession()
	if _, _, err := other.Eval(sessionTokens(5, 3)); err != nil {
		t.Fatal(err)
	}
	if _, reused, err := s.Eval(a); err != nil || reused != 0 {
		t.Errorf("after another session: reused %d, %v; want 0", reused, err)
	}
	if _, err := m.Forward(a[:3], 0, false); err != nil {
		t.Fatal(err)
	}
	if _, reused, err := s.Eval(a); err != nil || reused != 0 {
		t.Errorf("after a bare Forward: reused %d, %v; want 0", reused, err)
	}
}

// TestSessionGenerate: a second turn that repeats the first one's prompt
// and answer reuses all of it but the answer's last token (sampled, never
// evaluated), and samples what a fresh generation from the whole prompt
// samples.
func TestSessionGenerate(t *testing.T) {
	m := loadArch(t, "tiny-qwen3.gguf", cpu.New(2), model.Options{Context: 64})
	greedy := func() *sample.Sampler { return sample.New(sample.Params{Temp: 0}) }
	gen := func(s *model.Session, prompt []int32, n int) ([]int32, model.Stats) {
		var out []int32
		st, err := s.Generate(context.Background(), prompt, model.GenOptions{N: n, IgnoreEOS: true}, greedy(), func(id int32) error {
			out = append(out, id)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return out, st
	}
	s := m.NewSession()
	p1 := sessionTokens(10, 1)
	ans, st := gen(s, p1, 6)
	if len(ans) != 6 || st.PromptTokens != 10 || st.Reused != 0 {
		t.Fatalf("turn 1: %d tokens, prefilled %d, reused %d", len(ans), st.PromptTokens, st.Reused)
	}
	if want := cat(p1, ans[:5]); !slices.Equal(s.Tokens(), want) {
		t.Fatalf("after turn 1 the session holds %v, want the prompt and the answer less its last token %v", s.Tokens(), want)
	}
	p2 := cat(p1, ans, sessionTokens(7, 2))
	got, st := gen(s, p2, 5)
	if st.Reused != 15 || st.PromptTokens != len(p2)-15 {
		t.Errorf("turn 2: reused %d, prefilled %d; want 15 and %d", st.Reused, st.PromptTokens, len(p2)-15)
	}
	want, _ := gen(m.NewSession(), p2, 5)
	if !slices.Equal(got, want) {
		t.Errorf("turn 2 sampled %v, a fresh generation %v", got, want)
	}
}
