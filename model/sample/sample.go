// Package sample picks the next token from logits the way llama.cpp's default
// sampler chain does: penalties (repeat, frequency, presence), top-k, top-p,
// min-p, temperature, then a seeded draw; greedy (argmax) when the temperature
// is 0.
package sample

import (
	"math"
	"math/rand/v2"
	"sort"
)

// Params mirror llama.cpp's sampling flags and defaults.
type Params struct {
	Temp          float32 // 0 = greedy
	TopK          int     // 0 = off
	TopP          float32 // 1 = off
	MinP          float32 // 0 = off
	RepeatPenalty float32 // 1 = off
	FreqPenalty   float32 // subtracted once per occurrence; 0 = off
	PresPenalty   float32 // subtracted once if the token occurred; 0 = off
	RepeatLastN   int     // tokens of history the penalties look at; 0 = off
	Seed          uint64
}

// Defaults are llama.cpp's defaults.
func Defaults() Params {
	return Params{Temp: 0.8, TopK: 40, TopP: 0.95, MinP: 0.05, RepeatPenalty: 1, RepeatLastN: 64, Seed: 0xFFFFFFFF}
}

// Sampler holds the state of one generation: the random source and history.
type Sampler struct {
	p       Params
	rng     *rand.Rand
	history []int32
	cand    []candidate
}

type candidate struct {
	id    int32
	logit float32
	p     float64
}

// New returns a sampler; the same Params (seed included) give the same tokens.
func New(p Params) *Sampler {
	return &Sampler{p: p, rng: rand.New(rand.NewPCG(p.Seed, 0x9e3779b97f4a7c15))}
}

// Accept records a token (prompt or generated) for the penalties.
func (s *Sampler) Accept(id int32) {
	s.history = append(s.history, id)
	if n := s.p.RepeatLastN; n > 0 && len(s.history) > 2*n {
		s.history = append(s.history[:0], s.history[len(s.history)-n:]...)
	}
}

// Argmax returns the index of the largest logit (the first on ties, like llama.cpp).
func Argmax(logits []float32) int32 {
	best := 0
	for i, v := range logits {
		if v > logits[best] {
			best = i
		}
	}
	return int32(best)
}

// Sample picks the next token from logits (which it may modify).
func (s *Sampler) Sample(logits []float32) int32 {
	s.penalize(logits)
	if s.p.Temp <= 0 {
		return Argmax(logits)
	}
	var c []candidate
	if k := s.p.TopK; k > 0 && k < len(logits) {
		c = topK(s.cand[:0], logits, k)
	} else {
		c = s.cand[:0]
		for i, v := range logits {
			c = append(c, candidate{id: int32(i), logit: v})
		}
		sort.Slice(c, func(i, j int) bool { return c[i].logit > c[j].logit })
	}
	softmax(c, 1)
	if tp := float64(s.p.TopP); tp < 1 {
		cum := 0.0
		for i := range c {
			cum += c[i].p
			if cum >= tp {
				c = c[:i+1]
				break
			}
		}
	}
	if mp := float64(s.p.MinP); mp > 0 {
		// c is sorted, so c[0] holds the largest probability.
		keep := 1
		for keep < len(c) && c[keep].p >= mp*c[0].p {
			keep++
		}
		c = c[:keep]
	}
	softmax(c, s.p.Temp)
	s.cand = c
	r := s.rng.Float64()
	for _, x := range c {
		r -= x.p
		if r <= 0 {
			return x.id
		}
	}
	return c[len(c)-1].id
}

// penalize applies llama.cpp's penalties to the tokens seen in the last
// RepeatLastN: the repeat penalty divides a positive logit and multiplies a
// negative one, then count·FreqPenalty + PresPenalty is subtracted, count
// being the token's occurrences in that window.
func (s *Sampler) penalize(logits []float32) {
	p := s.p
	if p.RepeatLastN <= 0 || (p.RepeatPenalty == 1 || p.RepeatPenalty <= 0) && p.FreqPenalty == 0 && p.PresPenalty == 0 {
		return
	}
	rep := p.RepeatPenalty
	if rep <= 0 {
		rep = 1
	}
	h := s.history
	if len(h) > p.RepeatLastN {
		h = h[len(h)-p.RepeatLastN:]
	}
	count := make(map[int32]int, len(h))
	for _, id := range h {
		if id >= 0 && int(id) < len(logits) {
			count[id]++
		}
	}
	for id, n := range count {
		if logits[id] > 0 {
			logits[id] /= rep
		} else {
			logits[id] *= rep
		}
		logits[id] -= float32(n)*p.FreqPenalty + p.PresPenalty
	}
}

// softmax sets p over c from logit/temp.
func softmax(c []candidate, temp float32) {
	mx := math.Inf(-1)
	for _, x := range c {
		mx = max(mx, float64(x.logit/temp))
	}
	var sum float64
	for i := range c {
		c[i].p = math.Exp(float64(c[i].logit/temp) - mx)
		sum += c[i].p
	}
	for i := range c {
		c[i].p /= sum
	}
}

// Top returns the ids of the k largest logits (all of them if k is larger),
// the largest first and the lowest id first among equal ones: the
// candidates the top-k filter keeps (a server's logprobs alternatives).
func Top(logits []float32, k int) []int32 {
	c := topK(make([]candidate, 0, min(k, len(logits))), logits, min(k, len(logits)))
	ids := make([]int32, len(c))
	for i, x := range c {
		ids[i] = x.id
	}
	return ids
}

// topK returns the k candidates of logits with the largest logits, the
// largest first, through a min-heap of k: O(n log k) where sorting every
// candidate of a 128k vocabulary took tens of ms a token (a server
// samples each of its streams every step). Of equal logits at the cut the
// lowest ids stay.
func topK(c []candidate, logits []float32, k int) []candidate {
	less := func(a, b candidate) bool { return a.logit < b.logit || a.logit == b.logit && a.id > b.id }
	down := func(i int) {
		for {
			m, l, r := i, 2*i+1, 2*i+2
			if l < len(c) && less(c[l], c[m]) {
				m = l
			}
			if r < len(c) && less(c[r], c[m]) {
				m = r
			}
			if m == i {
				return
			}
			c[i], c[m] = c[m], c[i]
			i = m
		}
	}
	for i, v := range logits {
		x := candidate{id: int32(i), logit: v}
		if len(c) < k {
			c = append(c, x)
			if len(c) == k {
				for j := k/2 - 1; j >= 0; j-- {
					down(j)
				}
			}
			continue
		}
		if less(c[0], x) {
			c[0] = x
			down(0)
		}
	}
	sort.Slice(c, func(i, j int) bool { return less(c[j], c[i]) })
	return c
}
