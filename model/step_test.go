package model_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/vkinfer/vkinfer/backend"
	"github.com/vkinfer/vkinfer/backend/cpu"
	"github.com/vkinfer/vkinfer/gguf"
	"github.com/vkinfer/vkinfer/internal/fixtures"
	"github.com/vkinfer/vkinfer/model"
)

// stepPlan is a multi-sequence decode: the sessions' prompts, then per
// step which sessions decode (in that order) — sequences join and leave
// between steps.
type stepPlan struct {
	prompts [][]int32
	steps   [][]int
}

// awkwardPlan: three sequences of different lengths (on tiny-gemma3 with
// ubatches of 3 the longest is past a wrap of its 10-slot rings), decoded
// in changing sets and orders.
func awkwardPlan() stepPlan {
	return stepPlan{
		prompts: [][]int32{sessionTokens(5, 1), sessionTokens(17, 2), sessionTokens(30, 3)},
		steps:   [][]int{{0, 1, 2}, {2, 0}, {1}, {1, 2, 0}, {0, 2}, {2, 1, 0}, {1, 0}},
	}
}

// stepToken is the token session i decodes at step k: anything in the
// vocabulary, the same in both runs.
func stepToken(i, k int) int32 { return int32(7 + 31*i + 13*k) }

// decodeTogether runs p on m's sessions through Step and returns each
// session's logits after each of its tokens.
func decodeTogether(t *testing.T, m *model.Model, p stepPlan) [][][]float32 {
	t.Helper()
	ss, err := m.NewSessions(len(p.prompts))
	if err != nil {
		t.Fatal(err)
	}
	got := make([][][]float32, len(ss))
	for i, s := range ss {
		if _, _, err := s.Eval(p.prompts[i]); err != nil {
			t.Fatal(err)
		}
	}
	for k, set := range p.steps {
		var batch []*model.Session
		var toks []int32
		for _, i := range set {
			batch, toks = append(batch, ss[i]), append(toks, stepToken(i, k))
		}
		logits, err := m.Step(batch, toks)
		if err != nil {
			t.Fatalf("step %d: %v", k, err)
		}
		if len(logits) != len(set)*m.HP.Vocab {
			t.Fatalf("step %d: %d logits for %d sessions of %d", k, len(logits), len(set), m.HP.Vocab)
		}
		for j, i := range set {
			got[i] = append(got[i], slices.Clone(logits[j*m.HP.Vocab:(j+1)*m.HP.Vocab]))
		}
	}
	for i, s := range ss {
		want := slices.Clone(p.prompts[i])
		for k, set := range p.steps {
			if slices.Contains(set, i) {
				want = append(want, stepToken(i, k))
			}
		}
		if !slices.Equal(s.Tokens(), want) {
			t.Fatalf("session %d holds %v, want %v", i, s.Tokens(), want)
		}
	}
	return got
}

// decodeAlone runs p one session at a time on ref (a model of one
// sequence): each prompt, then its tokens one by one.
func decodeAlone(t *testing.T, ref *model.Model, p stepPlan) [][][]float32 {
	t.Helper()
	want := make([][][]float32, len(p.prompts))
	for i, prompt := range p.prompts {
		s := ref.NewSession()
		if _, _, err := s.Eval(prompt); err != nil {
			t.Fatal(err)
		}
		for k, set := range p.steps {
			if !slices.Contains(set, i) {
				continue
			}
			logits, err := ref.Step([]*model.Session{s}, []int32{stepToken(i, k)})
			if err != nil {
				t.Fatal(err)
			}
			want[i] = append(want[i], slices.Clone(logits))
		}
	}
	return want
}

// rowCases are the models and ubatches the row-program tests run on:
// global attention with F32 and Q4_K weights, and tiny-gemma3's rings of
// 10 slots (ubatches of 3).
var rowCases = []struct {
	name string
	ub   int
}{
	{"tiny-qwen3.gguf", 16},
	{"tiny-llama31-q4_k_m.gguf", 16},
	{"tiny-gemma3.gguf", 3},
}

// TestStepMatchesAlone: on the CPU backend, sequences decoded together in
// one forward pass, each at its own position in its own region of the
// cache, give exactly the logits each gives decoded alone (a row program
// computes every row as the one-token program does), as they join and
// leave; on global attention, F32 and Q4_K weights, and sliding-window
// rings past a wrap.
func TestStepMatchesAlone(t *testing.T) {
	for _, c := range rowCases {
		t.Run(c.name, func(t *testing.T) {
			p := awkwardPlan()
			m := loadArch(t, c.name, cpu.New(2), model.Options{Context: 64, UBatch: c.ub, Seqs: 4})
			ref := loadArch(t, c.name, cpu.New(2), model.Options{Context: 64, UBatch: c.ub})
			got, want := decodeTogether(t, m, p), decodeAlone(t, ref, p)
			for i := range want {
				for k := range want[i] {
					closeLogits(t, fmt.Sprintf("session %d, token %d", i, k), got[i][k], want[i][k], 0)
				}
			}
		})
	}
}

// TestSessionsApart: the sessions of one model keep their own sequences:
// evaluating one leaves what another holds reusable, and NewSessions
// takes the sequences over.
func TestSessionsApart(t *testing.T) {
	m := loadArch(t, "tiny-qwen3.gguf", cpu.New(2), model.Options{Context: 64, Seqs: 2})
	ss, err := m.NewSessions(2)
	if err != nil {
		t.Fatal(err)
	}
	a, b := sessionTokens(20, 1), sessionTokens(9, 2)
	if _, _, err := ss[0].Eval(a); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ss[1].Eval(b); err != nil {
		t.Fatal(err)
	}
	want, _, err := loadArch(t, "tiny-qwen3.gguf", cpu.New(2), model.Options{Context: 64}).NewSession().Eval(cat(a, b))
	if err != nil {
		t.Fatal(err)
	}
	got, reused, err := ss[0].Eval(cat(a, b))
	if err != nil || reused != 20 {
		t.Fatalf("session 0 after session 1 ran: reused %d, %v; want 20", reused, err)
	}
	closeLogits(t, "session 0", got, want, 0)
	if _, ok := ss[1].Next(cat(b, a[:1])); !ok {
		t.Error("session 1 cannot decode a token after what it holds")
	}
	if _, ok := ss[1].Next(cat(b, a[:2])); ok {
		t.Error("Next accepted two new tokens")
	}
	again, err := m.NewSessions(1)
	if err != nil {
		t.Fatal(err)
	}
	if _, reused, err := again[0].Eval(a); err != nil || reused != 0 {
		t.Errorf("a new session on sequence 0: reused %d, %v; want 0", reused, err)
	}
	if _, reused, err := ss[1].Eval(b); err != nil || reused != 8 {
		t.Errorf("session 1 after sequence 0 was taken: reused %d, %v; want 8", reused, err)
	}
}

// oneSeq hides the CPU backend's MultiSeq.
type oneSeq struct{ backend.Backend }

// TestStepErrors: bad steps and session counts are refused with clear
// errors, and a full context wraps ErrContextFull.
func TestStepErrors(t *testing.T) {
	m := loadArch(t, "tiny-qwen3.gguf", cpu.New(2), model.Options{Context: 16, Seqs: 3})
	if _, err := m.NewSessions(4); err == nil || !strings.Contains(err.Error(), "3 sequences") {
		t.Errorf("4 sessions of 3 sequences: %v", err)
	}
	ss, err := m.NewSessions(3)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what     string
		sessions []*model.Session
		tokens   []int32
		want     string
	}{
		{"no sessions", nil, nil, "0 sessions"},
		{"fewer tokens", ss, []int32{1, 2}, "3 sessions and 2 tokens"},
		{"one sequence twice", []*model.Session{ss[0], ss[1], ss[0]}, []int32{1, 2, 3}, "the same sequence"},
	} {
		if _, err := m.Step(c.sessions, c.tokens); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.what, err, c.want)
		}
	}
	if _, _, err := ss[1].Eval(sessionTokens(16, 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Step(ss, []int32{1, 2, 3}); !errors.Is(err, model.ErrContextFull) {
		t.Errorf("a step past the context: %v, want ErrContextFull", err)
	}
	if len(ss[0].Tokens()) != 0 || len(ss[2].Tokens()) != 0 {
		t.Errorf("a refused step appended tokens")
	}
	other := loadArch(t, "tiny-qwen3.gguf", cpu.New(2), model.Options{Context: 16, Seqs: 3})
	os, _ := other.NewSessions(1)
	if _, err := m.Step([]*model.Session{ss[0], os[0]}, []int32{1, 2}); err == nil || !strings.Contains(err.Error(), "another model") {
		t.Errorf("a session of another model: %v", err)
	}
	f, err := gguf.Open(fixtures.Path(t, "arch", "tiny-qwen3.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := model.Load(f, oneSeq{cpu.New(1)}, model.Options{Seqs: 2}); err == nil || !strings.Contains(err.Error(), "holds one sequence") {
		t.Errorf("Load of 2 sequences on a backend of one: %v", err)
	}
}

// batchRound is one EvalBatch: per session of the batch, the tokens it is
// to hold and how many of them it keeps.
type batchRound struct {
	what     string
	sessions []int
	tokens   [][]int32
	reused   []int
}

// batchRounds: four sequences in ubatches of ub. The prompts arrive
// together, then sessions decode a token, take a chat turn, diverge from
// what they hold, and grow past a ubatch (which runs alone), in mixed
// batches; then all four decode.
func batchRounds(ub int) []batchRound {
	p := [][]int32{sessionTokens(5, 1), sessionTokens(9, 2), sessionTokens(2, 3), sessionTokens(13, 4)}
	turn, other, long := sessionTokens(3, 5), sessionTokens(6, 6), sessionTokens(ub+4, 7)
	r1 := [][]int32{cat(p[0], []int32{17}), cat(p[1], turn), cat(p[2], []int32{23}), cat(p[3][:11], other)}
	r2 := [][]int32{cat(r1[0], []int32{29}), cat(r1[2], long), cat(r1[1], []int32{31})}
	r3 := [][]int32{cat(r2[0], []int32{41}), cat(r2[1], []int32{43}), cat(r2[2], []int32{47}), cat(r1[3], []int32{53})}
	return []batchRound{
		{"prompts together", []int{0, 1, 2, 3}, p, []int{0, 0, 0, 0}},
		{"a decode, a turn, a decode, a divergence", []int{0, 1, 2, 3}, r1, []int{5, 9, 2, 11}},
		{"a longer prompt between decodes", []int{0, 2, 1}, r2, []int{6, 3, 12}},
		{"all decode", []int{0, 2, 1, 3}, r3, []int{7, len(r2[1]), 13, 17}},
	}
}

// checkBatches runs batchRounds through m.EvalBatch and checks each
// session's reuse, tokens and last logits against ref (one sequence), a
// fresh evaluation of the same tokens, to tol of the largest logit.
func checkBatches(t *testing.T, m, ref *model.Model, ub int, tol float64) {
	t.Helper()
	ss, err := m.NewSessions(4)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range batchRounds(ub) {
		var batch []*model.Session
		for _, i := range r.sessions {
			batch = append(batch, ss[i])
		}
		logits, reused, err := m.EvalBatch(batch, r.tokens)
		if err != nil {
			t.Fatalf("%s: %v", r.what, err)
		}
		if !slices.Equal(reused, r.reused) {
			t.Errorf("%s: reused %v, want %v", r.what, reused, r.reused)
		}
		for j, s := range batch {
			if !slices.Equal(s.Tokens(), r.tokens[j]) {
				t.Fatalf("%s: session %d holds %v, want %v", r.what, r.sessions[j], s.Tokens(), r.tokens[j])
			}
			want, _, err := ref.NewSession().Eval(r.tokens[j])
			if err != nil {
				t.Fatal(err)
			}
			closeLogits(t, fmt.Sprintf("%s: session %d", r.what, r.sessions[j]), logits[j*m.HP.Vocab:(j+1)*m.HP.Vocab], want, tol)
		}
	}
}

// TestEvalBatch: on the CPU backend, prompts, chat turns and decode tokens
// of several sequences evaluated together in row programs give the logits
// a fresh evaluation of each sequence gives, on global attention, Q4_K
// weights, and tiny-gemma3's rings (ubatches of 3: most rounds then run
// in several passes, and a sequence's rows in one pass read ring slots the
// same pass writes).
func TestEvalBatch(t *testing.T) {
	for _, c := range rowCases {
		t.Run(c.name, func(t *testing.T) {
			m := loadArch(t, c.name, cpu.New(2), model.Options{Context: 64, UBatch: c.ub, Seqs: 4})
			ref := loadArch(t, c.name, cpu.New(2), model.Options{Context: 64, UBatch: c.ub})
			checkBatches(t, m, ref, c.ub, 1e-5)
		})
	}
}

// TestEvalBatchErrors: bad batches are refused before anything runs, a
// context overflow wraps ErrContextFull, and the sessions keep what they
// held.
func TestEvalBatchErrors(t *testing.T) {
	m := loadArch(t, "tiny-qwen3.gguf", cpu.New(2), model.Options{Context: 16, Seqs: 2})
	ss, err := m.NewSessions(2)
	if err != nil {
		t.Fatal(err)
	}
	a := sessionTokens(6, 1)
	if _, _, err := ss[0].Eval(a); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what     string
		sessions []*model.Session
		tokens   [][]int32
		want     string
	}{
		{"no sessions", nil, nil, "0 sessions"},
		{"fewer token lists", ss, [][]int32{a}, "2 sessions and 1 token lists"},
		{"no tokens", ss, [][]int32{a, nil}, "session 1 has no tokens"},
		{"one sequence twice", []*model.Session{ss[0], ss[0]}, [][]int32{a, a}, "the same sequence"},
		{"past the context", ss, [][]int32{a, sessionTokens(17, 2)}, "exceed the context"},
	} {
		if _, _, err := m.EvalBatch(c.sessions, c.tokens); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.what, err, c.want)
		}
	}
	if _, _, err := m.EvalBatch(ss, [][]int32{a, sessionTokens(17, 2)}); !errors.Is(err, model.ErrContextFull) {
		t.Errorf("past the context: %v, want ErrContextFull", err)
	}
	if !slices.Equal(ss[0].Tokens(), a) {
		t.Errorf("a refused batch changed what session 0 holds: %v", ss[0].Tokens())
	}
}

// TestEvalBatchPrograms: mixed batches of more shapes than the model keeps
// programs for (maxMixed, 2) each give a fresh evaluation's logits, the
// first shape again after its program was closed and recorded anew
// included.
func TestEvalBatchPrograms(t *testing.T) {
	m := loadArch(t, "tiny-qwen3.gguf", cpu.New(2), model.Options{Context: 64, UBatch: 16, Seqs: 2})
	ref := loadArch(t, "tiny-qwen3.gguf", cpu.New(2), model.Options{Context: 64, UBatch: 16})
	ss, err := m.NewSessions(2)
	if err != nil {
		t.Fatal(err)
	}
	// Shape k: a prompt of k+2 tokens beside another of 3, a pass of k+5
	// rows with 2 rows of logits; shape 0 comes back last.
	for i, k := range []int{0, 1, 2, 3, 4, 5, 0} {
		toks := [][]int32{sessionTokens(k+2, 10+i), sessionTokens(3, 20+i)}
		logits, _, err := m.EvalBatch(ss, toks)
		if err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
		for j := range ss {
			want, _, err := ref.NewSession().Eval(toks[j])
			if err != nil {
				t.Fatal(err)
			}
			closeLogits(t, fmt.Sprintf("batch %d, session %d", i, j), logits[j*m.HP.Vocab:(j+1)*m.HP.Vocab], want, 1e-5)
		}
	}
}

// fewRows is a CPU backend whose row programs of more than 4 rows fail to
// record, as a device short of memory would fail them.
type fewRows struct{ *cpu.Backend }

func (b fewRows) RecordRows(n int, build func(backend.Ops)) (backend.Program, error) {
	if n > 4 {
		return nil, fmt.Errorf("a row program of %d rows: out of device memory", n)
	}
	return b.Backend.RecordRows(n, build)
}

// TestEvalBatchFallback: when a mixed batch's program cannot be recorded,
// EvalBatch prefills the sessions one by one instead, with the same
// results.
func TestEvalBatchFallback(t *testing.T) {
	m := loadArch(t, "tiny-qwen3.gguf", fewRows{cpu.New(2)}, model.Options{Context: 64, UBatch: 16, Seqs: 4})
	ref := loadArch(t, "tiny-qwen3.gguf", cpu.New(2), model.Options{Context: 64, UBatch: 16})
	checkBatches(t, m, ref, 16, 1e-5)
}
