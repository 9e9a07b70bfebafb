package model

import (
	"context"
	"fmt"
	"time"

	"github.com/vkinfer/vkinfer/model/sample"
)

// Stats are the timings of one generation, in llama.cpp's terms.
type Stats struct {
	PromptTokens int
	PromptTime   time.Duration
	GenTokens    int // tokens sampled after the prompt, the first included
	GenTime      time.Duration
}

// GenOptions control Generate.
type GenOptions struct {
	N         int  // tokens to sample; < 0: until end of generation or a full context
	IgnoreEOS bool // keep going past end-of-generation tokens (they are emitted)
}

// Generate evaluates prompt and then samples up to o.N tokens, calling emit
// with each one before it is fed back. It stops at an end-of-generation token
// (not emitted) unless o.IgnoreEOS, or when ctx is cancelled; the stats
// cover what ran either way.
func (m *Model) Generate(ctx context.Context, prompt []int32, o GenOptions, s *sample.Sampler, emit func(id int32) error) (st Stats, err error) {
	n := o.N
	if len(prompt) == 0 {
		return st, fmt.Errorf("model: empty prompt (no tokens to evaluate)")
	}
	if n < 0 {
		n = m.Context - len(prompt)
	}
	if len(prompt)+n > m.Context {
		return st, fmt.Errorf("model: the prompt (%d tokens) plus %d tokens to generate exceed the context of %d; raise -c or lower -n", len(prompt), n, m.Context)
	}
	for _, id := range prompt {
		s.Accept(id)
	}
	t0 := time.Now()
	logits, ferr := m.Forward(prompt, 0, false)
	st.PromptTokens, st.PromptTime = len(prompt), time.Since(t0)
	if ferr != nil {
		return st, ferr
	}
	pos := len(prompt)
	t0 = time.Now()
	defer func() { st.GenTime = time.Since(t0) }()
	for st.GenTokens < n {
		if err := ctx.Err(); err != nil {
			return st, err
		}
		id := s.Sample(logits)
		st.GenTokens++
		if m.Tok.IsEOG(id) && !o.IgnoreEOS {
			break
		}
		if err := emit(id); err != nil {
			return st, err
		}
		s.Accept(id)
		if st.GenTokens == n {
			break
		}
		if logits, err = m.Forward([]int32{id}, pos, false); err != nil {
			return st, err
		}
		pos++
	}
	return st, nil
}
