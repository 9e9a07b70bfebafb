package model

import (
	"context"
	"time"

	"github.com/vkinfer/vkinfer/model/sample"
)

// Stats are the timings of one generation, in llama.cpp's terms.
type Stats struct {
	PromptTokens int // tokens prefilled
	Reused       int // prompt tokens whose K/V the session already held (not in PromptTokens)
	PromptTime   time.Duration
	GenTokens    int // tokens sampled after the prompt, the first included
	GenTime      time.Duration
}

// GenOptions control Generate.
type GenOptions struct {
	N         int  // tokens to sample; < 0: until end of generation or a full context
	IgnoreEOS bool // keep going past end-of-generation tokens (they are emitted)
}

// Generate evaluates prompt from an empty cache and then samples up to o.N
// tokens, calling emit with each one before it is fed back: a new session's
// Generate (which see).
func (m *Model) Generate(ctx context.Context, prompt []int32, o GenOptions, s *sample.Sampler, emit func(id int32) error) (Stats, error) {
	return m.NewSession().Generate(ctx, prompt, o, s, emit)
}
