package sample

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

func logitsOf(v ...float32) []float32 { return append([]float32(nil), v...) }

func TestGreedyIsArgmax(t *testing.T) {
	s := New(Params{Temp: 0, RepeatPenalty: 1})
	if got := s.Sample(logitsOf(0.1, 3, -2, 2.9)); got != 1 {
		t.Fatalf("greedy picked %d, want 1", got)
	}
	if got := Argmax(logitsOf(1, 5, 5)); got != 1 {
		t.Fatalf("argmax tie picked %d, want the first (1)", got)
	}
}

func TestSeedRepeatable(t *testing.T) {
	p := Defaults()
	p.Seed = 42
	run := func() []int32 {
		s := New(p)
		var out []int32
		for i := range 50 {
			l := make([]float32, 32)
			for j := range l {
				l[j] = float32(math.Sin(float64(i*7 + j)))
			}
			out = append(out, s.Sample(l))
		}
		return out
	}
	a, b := run(), run()
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("same seed diverged at step %d: %d vs %d", i, a[i], b[i])
		}
	}
	p.Seed = 43
	s := New(p)
	diff := false
	for i := range 50 {
		l := make([]float32, 32)
		for j := range l {
			l[j] = float32(math.Sin(float64(i*7 + j)))
		}
		diff = diff || s.Sample(l) != a[i]
	}
	if !diff {
		t.Fatal("a different seed gave the same 50 tokens")
	}
}

// TestDistribution draws many samples at temperature 1 with no filters and
// compares the frequencies with the softmax.
func TestDistribution(t *testing.T) {
	l := []float32{0, 1, 2, -1}
	s := New(Params{Temp: 1, TopP: 1, RepeatPenalty: 1, Seed: 7})
	const n = 200000
	count := make([]int, len(l))
	for range n {
		count[s.Sample(logitsOf(l...))]++
	}
	var z float64
	for _, v := range l {
		z += math.Exp(float64(v))
	}
	for i, v := range l {
		want := math.Exp(float64(v)) / z
		got := float64(count[i]) / n
		if math.Abs(got-want) > 0.01 {
			t.Errorf("token %d drawn with frequency %.4f, want %.4f", i, got, want)
		}
	}
}

func TestFilters(t *testing.T) {
	l := []float32{5, 4.9, 0, -3}
	cases := []struct {
		name    string
		p       Params
		allowed map[int32]bool
	}{
		{"top-k 2", Params{Temp: 1, TopK: 2, TopP: 1, RepeatPenalty: 1}, map[int32]bool{0: true, 1: true}},
		{"top-k 1", Params{Temp: 5, TopK: 1, TopP: 1, RepeatPenalty: 1}, map[int32]bool{0: true}},
		{"min-p 0.5", Params{Temp: 1, TopP: 1, MinP: 0.5, RepeatPenalty: 1}, map[int32]bool{0: true, 1: true}},
		{"top-p 0.4", Params{Temp: 1, TopP: 0.4, RepeatPenalty: 1}, map[int32]bool{0: true}},
	}
	for _, c := range cases {
		s := New(c.p)
		seen := map[int32]bool{}
		for range 2000 {
			id := s.Sample(logitsOf(l...))
			if !c.allowed[id] {
				t.Fatalf("%s: sampled filtered token %d", c.name, id)
			}
			seen[id] = true
		}
		if len(seen) != len(c.allowed) {
			t.Errorf("%s: saw %v, want every token of %v", c.name, seen, c.allowed)
		}
	}
}

func TestRepeatPenalty(t *testing.T) {
	s := New(Params{Temp: 0, RepeatPenalty: 2, RepeatLastN: 4})
	s.Accept(0)
	l := logitsOf(3, 2, -1)
	if got := s.Sample(l); got != 1 {
		t.Fatalf("penalised token still chosen: got %d, want 1", got)
	}
	if l[0] != 1.5 {
		t.Fatalf("positive logit penalised to %v, want 1.5", l[0])
	}
	s.Accept(2)
	l = logitsOf(-1, -2, -1)
	s.Sample(l)
	if l[2] != -2 {
		t.Fatalf("negative logit penalised to %v, want -2", l[2])
	}
	for range 10 {
		s.Accept(1)
	}
	l = logitsOf(3, 2, 1)
	if s.Sample(l); l[0] != 3 {
		t.Fatalf("token outside the last-N window still penalised: %v", l[0])
	}
}

// TestFreqPresencePenalty: llama.cpp's frequency and presence penalties
// subtract count·freq + presence from a token seen in the window, after the
// repeat penalty, and leave unseen tokens and tokens outside the window alone.
func TestFreqPresencePenalty(t *testing.T) {
	s := New(Params{Temp: 0, RepeatPenalty: 2, FreqPenalty: 0.5, PresPenalty: 0.25, RepeatLastN: 4})
	for _, id := range []int32{3, 0, 0, 0, 2} { // 3 falls out of the last-4 window
		s.Accept(id)
	}
	l := logitsOf(4, 1, -1, 5)
	s.Sample(l)
	// token 0: 4/2 - 3·0.5 - 0.25; token 2: -1·2 - 0.5 - 0.25.
	want := []float32{0.25, 1, -2.75, 5}
	for i := range want {
		if math.Abs(float64(l[i]-want[i])) > 1e-6 {
			t.Errorf("logit %d: got %v, want %v (all %v)", i, l[i], want[i], l)
		}
	}
	// The penalties alone, without a repeat penalty, still apply; a zero
	// window turns them all off.
	s = New(Params{Temp: 0, RepeatPenalty: 1, FreqPenalty: 1, RepeatLastN: 8})
	s.Accept(0)
	s.Accept(0)
	if l = logitsOf(3, 2); s.Sample(l) != 1 || l[0] != 1 {
		t.Errorf("frequency penalty without a repeat penalty: logits %v", l)
	}
	s = New(Params{Temp: 0, RepeatPenalty: 1, FreqPenalty: 1, PresPenalty: 1, RepeatLastN: 0})
	s.Accept(0)
	if l = logitsOf(3, 2); s.Sample(l) != 0 || l[0] != 3 {
		t.Errorf("RepeatLastN 0 still penalised: logits %v", l)
	}
}

// TestTopK: the heap selection equals sorting every candidate and cutting
// at k, on random logits with many ties, for k from 1 to past half the
// vocabulary.
func TestTopK(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, n := range []int{1, 2, 7, 100, 1000} {
		logits := make([]float32, n)
		for i := range logits {
			logits[i] = float32(r.IntN(20)) // ties everywhere
		}
		for _, k := range []int{1, 2, 5, n/2 + 1, n - 1} {
			if k < 1 || k >= n {
				continue
			}
			want := make([]candidate, n)
			for i, v := range logits {
				want[i] = candidate{id: int32(i), logit: v}
			}
			sort.SliceStable(want, func(i, j int) bool { return want[i].logit > want[j].logit })
			got := topK(nil, logits, k)
			ids := Top(logits, k)
			if len(got) != k || len(ids) != k {
				t.Fatalf("n %d k %d: %d candidates, %d ids", n, k, len(got), len(ids))
			}
			for i := range got {
				if got[i].id != want[i].id || got[i].logit != want[i].logit || ids[i] != want[i].id {
					t.Fatalf("n %d k %d: candidate %d is %+v (Top: %d), want %+v", n, k, i, got[i], ids[i], want[i])
				}
			}
		}
	}
}
