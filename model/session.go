package model

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/vkinfer/vkinfer/model/sample"
)

// ErrContextFull is wrapped by the errors of Session.Eval and
// Session.Generate when the tokens to hold do not fit the context.
var ErrContextFull = errors.New("the context is full")

// Session is the conversation whose tokens the model's KV cache holds. A
// model has one cache, so one session at a time: NewSession takes the cache
// over, and a session it was taken from starts again from nothing.
//
// Eval keeps the longest prefix of the new tokens the cache already holds
// and runs only the rest. Sliding-window layers keep rings (Cache.Slots):
// once positions beyond the kept prefix have been written, a ring slot a
// kept position needs may hold a later one. The session remembers which
// position each ring slot holds and re-evaluates everything when a slot the
// new tokens would read was overwritten.
type Session struct {
	m      *Model
	tokens []int32
	rings  []ring
}

// ring is what the slots of the sliding layers of one (window, slots)
// geometry hold.
type ring struct {
	window int
	pos    []int // pos[s]: the position slot s holds, -1 when none
}

// NewSession returns an empty session that owns the model's cache,
// forgetting whatever the cache held.
func (m *Model) NewSession() *Session {
	s := &Session{m: m}
	seen := map[[2]int]bool{}
	for l := range m.Cache.Layers {
		w, n := m.Cache.Window(l), m.Cache.Slots(l)
		if w <= 0 || seen[[2]int{w, n}] {
			continue
		}
		seen[[2]int{w, n}] = true
		s.rings = append(s.rings, ring{window: w, pos: make([]int, n)})
	}
	s.Reset()
	m.session = s
	return s
}

// Tokens returns the tokens whose K/V the cache holds, in order (positions
// 0 … len-1). The slice must not be changed.
func (s *Session) Tokens() []int32 {
	s.claim()
	return s.tokens
}

// Reset empties the session (the cache's contents are forgotten, not
// cleared: every position is written before it is read).
func (s *Session) Reset() {
	s.tokens = s.tokens[:0]
	for _, r := range s.rings {
		for i := range r.pos {
			r.pos[i] = -1
		}
	}
}

// claim makes s the session the cache holds, empty if another session used
// the cache since.
func (s *Session) claim() {
	if s.m.session != s {
		s.Reset()
		s.m.session = s
	}
}

// Eval makes the cache hold tokens: it keeps the longest prefix the cache
// already holds (where the rings allow, see Session) and runs only the rest
// through Forward. It returns the logits of the last token (reused by the
// next Forward) and how many tokens were reused; len(tokens)-reused were
// prefilled. The last token is always evaluated, its logits being needed.
// Tokens that do not fit the context give an error wrapping ErrContextFull,
// and the session keeps what it held.
func (s *Session) Eval(tokens []int32) (logits []float32, reused int, err error) {
	s.claim()
	if len(tokens) == 0 {
		return nil, 0, fmt.Errorf("model: no tokens to evaluate")
	}
	if len(tokens) > s.m.Context {
		return nil, 0, fmt.Errorf("model: %d tokens exceed the context of %d: %w", len(tokens), s.m.Context, ErrContextFull)
	}
	keep := min(commonPrefix(s.tokens, tokens), len(tokens)-1)
	if !s.intact(keep) {
		keep = 0
	}
	s.tokens = s.tokens[:keep]
	logits, err = s.run(tokens[keep:])
	return logits, keep, err
}

// run evaluates tokens after those the session holds and appends them.
// After an error the cache's state past the held prefix is unknown: the
// session keeps only what it held before.
func (s *Session) run(tokens []int32) ([]float32, error) {
	pos := len(s.tokens)
	logits, err := s.m.forward(tokens, pos, false)
	// Whatever ran, the slots of these positions may have been written.
	for _, r := range s.rings {
		for p := pos; p < pos+len(tokens); p++ {
			r.pos[p%len(r.pos)] = p
		}
	}
	if err != nil {
		return nil, err
	}
	s.tokens = append(s.tokens, tokens...)
	return logits, nil
}

// intact reports whether the rings still hold every position that tokens
// evaluated from position keep on would read: keep-W+1 … keep-1 for a
// window W.
func (s *Session) intact(keep int) bool {
	for _, r := range s.rings {
		for p := max(0, keep-r.window+1); p < keep; p++ {
			if r.pos[p%len(r.pos)] != p {
				return false
			}
		}
	}
	return true
}

func commonPrefix(a, b []int32) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// Generate evaluates prompt through Eval (reusing what the session holds)
// and then samples up to o.N tokens, calling emit with each one before it
// is fed back. Every emitted token but the last is evaluated and appended
// to the session, so a next prompt that repeats the answer reuses it. It
// stops at an end-of-generation token (not emitted, not appended) unless
// o.IgnoreEOS, or when ctx is cancelled; the stats cover what ran either
// way, PromptTokens counting the prefilled tokens only (Reused the others).
func (s *Session) Generate(ctx context.Context, prompt []int32, o GenOptions, smp *sample.Sampler, emit func(id int32) error) (st Stats, err error) {
	m := s.m
	n := o.N
	if len(prompt) == 0 {
		return st, fmt.Errorf("model: empty prompt (no tokens to evaluate)")
	}
	if n < 0 {
		n = m.Context - len(prompt)
	}
	if len(prompt)+n > m.Context {
		return st, fmt.Errorf("model: the prompt (%d tokens) plus %d tokens to generate exceed the context of %d; raise -c or lower -n: %w",
			len(prompt), n, m.Context, ErrContextFull)
	}
	for _, id := range prompt {
		smp.Accept(id)
	}
	t0 := time.Now()
	logits, reused, ferr := s.Eval(prompt)
	st.PromptTokens, st.Reused, st.PromptTime = len(prompt)-reused, reused, time.Since(t0)
	if ferr != nil {
		return st, ferr
	}
	t0 = time.Now()
	defer func() { st.GenTime = time.Since(t0) }()
	for st.GenTokens < n {
		if err := ctx.Err(); err != nil {
			return st, err
		}
		id := smp.Sample(logits)
		st.GenTokens++
		if m.Tok.IsEOG(id) && !o.IgnoreEOS {
			break
		}
		if err := emit(id); err != nil {
			return st, err
		}
		smp.Accept(id)
		if st.GenTokens == n {
			break
		}
		if logits, err = s.run([]int32{id}); err != nil {
			return st, err
		}
	}
	return st, nil
}
