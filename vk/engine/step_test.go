package engine_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/vkinfer/vkinfer/backend"
	"github.com/vkinfer/vkinfer/gguf"
	"github.com/vkinfer/vkinfer/internal/fixtures"
	"github.com/vkinfer/vkinfer/model"
	"github.com/vkinfer/vkinfer/vk/engine"
)

// TestStepMatchesAlone: on the Vulkan engine, sequences decoded together
// in one forward pass (Model.Step over a row program: each row at its own
// position in its own region of the cache) give the logits each gives
// decoded alone on a cache of one sequence, as they join and leave: three
// prompts of 5, 17 and 30 tokens (prefilled into regions 0, 1 and 2 by
// the one-sequence programs), on global attention and on tiny-gemma3's
// sliding-window rings (ubatch 3: rings of 10 slots, the longest sequence
// past its wrap). The row program's products take n columns where the
// one-token program takes one; the matrix-vector kernels reduce each
// column alike, and the logits are equal to the bit (measured on
// lavapipe). The bound is 1e-5 of the largest logit all the same, with the
// worst logged: while the RMS norm was folded into the o and down products
// (matvec_norm, since reverted) one run of three differed by 1.4e-6 of
// logits up to 6.25 (tiny-qwen3; not traced). (Q4_K weights go through the same
// kernels; the CPU backend's test covers them, and here they tripled the
// test's time.)
func TestStepMatchesAlone(t *testing.T) {
	prompts := [][]int32{stepTokens(5, 1), stepTokens(17, 2), stepTokens(30, 3)}
	steps := [][]int{{0, 1, 2}, {2, 0}, {1}, {1, 2, 0}, {0, 2}, {2, 1, 0}, {1, 0}}
	token := func(i, k int) int32 { return int32(7 + 31*i + 13*k) }
	for _, c := range []struct {
		name string
		ub   int
	}{{"tiny-qwen3", 16}, {"tiny-gemma3", 3}} {
		t.Run(c.name, func(t *testing.T) {
			f, err := gguf.Open(fixtures.Path(t, "arch", c.name+".gguf"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			load := func(seqs int) *model.Model {
				m, err := model.Load(f, openWith(t, engine.Options{IntDot: f32.IntDot}), model.Options{Context: 64, UBatch: c.ub, Seqs: seqs})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(m.Close)
				return m
			}
			// Together: every prompt into its sequence, then the steps.
			m := load(4)
			ss, err := m.NewSessions(len(prompts))
			if err != nil {
				t.Fatal(err)
			}
			got := make([][][]float32, len(prompts))
			for i, s := range ss {
				if _, _, err := s.Eval(prompts[i]); err != nil {
					t.Fatal(err)
				}
			}
			for k, set := range steps {
				var batch []*model.Session
				var toks []int32
				for _, i := range set {
					batch, toks = append(batch, ss[i]), append(toks, token(i, k))
				}
				logits, err := m.Step(batch, toks)
				if err != nil {
					t.Fatalf("step %d: %v", k, err)
				}
				for j, i := range set {
					got[i] = append(got[i], slices.Clone(logits[j*m.HP.Vocab:(j+1)*m.HP.Vocab]))
				}
			}
			// Alone, one sequence at a time on a cache of one.
			ref := load(1)
			worst := 0.0
			for i, prompt := range prompts {
				s := ref.NewSession()
				if _, _, err := s.Eval(prompt); err != nil {
					t.Fatal(err)
				}
				n := 0
				for k, set := range steps {
					if !slices.Contains(set, i) {
						continue
					}
					want, err := ref.Step([]*model.Session{s}, []int32{token(i, k)})
					if err != nil {
						t.Fatal(err)
					}
					diff, scale := logitDiff(want, got[i][n])
					if worst = max(worst, diff/max(1, scale)); diff > 1e-5*max(1, scale) {
						t.Fatalf("session %d, token %d: together and alone differ by %.3g (max |logit| %.3g)", i, n, diff, scale)
					}
					n++
				}
			}
			t.Logf("together and alone differ by at most %.3g of the largest logit", worst)
		})
	}
}

// stepTokens is a prompt of n tokens, different for each seed.
func stepTokens(n, seed int) []int32 {
	toks := make([]int32, n)
	for i := range toks {
		toks[i] = int32(3 + (i*97+seed*41)%500)
	}
	return toks
}

// TestRunAllocs: a recorded program's run, which a server makes once per
// decoded token, allocates nothing in Go: the token ids and the step (a
// position, or a row program's table of positions and sequences) go
// through buffers the program keeps. The programs rotate a tensor with
// RoPE, which reads the step.
func TestRunAllocs(t *testing.T) {
	e := open(t)
	defer e.Close()
	// Outputs of more than 32 bytes: Go keeps smaller variable-size
	// allocations on the stack, where the test would not see them.
	const seqs, dim = 3, 64
	if err := e.InitCache(backend.Cache{Layers: 1, Context: 32, KVDim: dim, Seqs: seqs}); err != nil {
		t.Fatal(err)
	}
	rope := backend.RoPE{Heads: 2, HeadDim: dim / 2, Dims: dim / 2, Base: 10000, Scale: 1}
	build := func(n int) func(backend.Ops) {
		return func(ops backend.Ops) {
			x := ops.Tensor(n, dim)
			ops.RoPE(x, rope)
			ops.Output(x)
		}
	}
	one, err := e.Record(1, build(1))
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	rows, err := e.RecordRows(seqs, build(seqs))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	tok, out1 := []int32{0}, make([]float32, dim)
	toks, ids, pos, out := []int32{0, 0, 0}, []int32{2, 0, 1}, []int32{5, 17, 30}, make([]float32, seqs*dim)
	for name, run := range map[string]func() error{
		"Run":     func() error { return one.Run(tok, 7, out1) },
		"RunRows": func() error { return rows.RunRows(toks, ids, pos, out) },
	} {
		if err := run(); err != nil { // the first run may set things up
			t.Fatal(err)
		}
		var err error
		if allocs := testing.AllocsPerRun(20, func() { err = errors.Join(err, run()) }); allocs != 0 {
			t.Errorf("%s: %v allocations a run, want 0", name, allocs)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}
