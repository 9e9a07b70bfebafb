package server

import (
	"math"

	"github.com/vkinfer/vkinfer/model/sample"
)

// maxTopLogprobs bounds the alternatives a request may ask for per token
// (OpenAI's limit for chat; the server applies it to completions too).
const maxTopLogprobs = 20

// tokenLogprob is one generated token's entry: its log-probability and
// the n most likely tokens at its position, the most likely first.
type tokenLogprob struct {
	id      int32
	logprob float32
	top     []altLogprob
}

type altLogprob struct {
	id      int32
	logprob float32
}

// logprobs are the log-probabilities of the model's distribution, the
// log-softmax of the logits as the engine returns them: before the
// penalties and the temperature the sampler applies, as llama-server
// reports them by default. measure runs before the sampler (which
// changes the logits in place), entry after it has chosen.
type logprobs struct {
	top    int       // alternatives per entry
	logits []float32 // the step's logits, as the engine returned them
	lse    float64   // log Σ exp(logit)
}

func (lp *logprobs) measure(logits []float32) {
	lp.logits = append(lp.logits[:0], logits...)
	mx := float32(math.Inf(-1))
	for _, v := range logits {
		mx = max(mx, v)
	}
	lp.lse = float64(mx) + math.Log(expSum(logits, mx))
}

// expSum is Σ exp(v − mx) over logits whose largest is mx. It runs in every
// sampling step of a request with logprobs, over the whole vocabulary, where
// math.Exp took 2.3–2.5 ms a token for Qwen3's 151936 logits on this
// project's CI machine: as long as a decode step on a GPU. Here each term
// is 2^x split into 2^n (an exponent field) and 2^f for f in [−½, ½]
// (Cephes' exp2f polynomial, relative error below 2e-7) in float32, summed
// in float64: 1.25 ms. Terms below 2^−125 are dropped: each is under
// float32's precision of the sum, which is at least 1 (the max's own term).
func expSum(logits []float32, mx float32) float64 {
	const log2e = 1.4426950408889634
	var sum float64
	for _, v := range logits {
		x := (v - mx) * log2e // ≤ 0
		if !(x >= -125) {
			continue // also a −Inf (banned) or NaN logit
		}
		n := int32(x - 0.5) // x rounded to the nearest integer: truncation is ceil below 0
		f := x - float32(n)
		p := 1 + f*(6.931472028550421e-1+f*(2.402264791363012e-1+f*(5.550332471162809e-2+
			f*(9.618437357674640e-3+f*(1.339887440266574e-3+f*1.535336188319500e-4)))))
		sum += float64(p * math.Float32frombits(uint32(n+127)<<23))
	}
	return sum
}

// entry is the chosen token's entry; the alternatives are the sampler's
// top-k selection (the lowest id first among equal logits).
func (lp *logprobs) entry(id int32) tokenLogprob {
	e := tokenLogprob{id: id, logprob: lp.of(id)}
	if lp.top == 0 {
		return e
	}
	best := sample.Top(lp.logits, lp.top)
	e.top = make([]altLogprob, len(best))
	for k, t := range best {
		e.top[k] = altLogprob{id: t, logprob: lp.of(t)}
	}
	return e
}

func (lp *logprobs) of(id int32) float32 {
	return float32(float64(lp.logits[id]) - lp.lse)
}

// The response shapes. Chat gives each token's text and bytes with its
// alternatives; completions give OpenAI's legacy parallel arrays.
type chatLogprobs struct {
	Content []chatTokenLogprob `json:"content"`
	Refusal []chatTokenLogprob `json:"refusal"`
}

type chatTokenLogprob struct {
	chatAltLogprob
	TopLogprobs []chatAltLogprob `json:"top_logprobs"`
}

type chatAltLogprob struct {
	Token   string  `json:"token"`
	Logprob float32 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

type textLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []float32            `json:"token_logprobs"`
	TopLogprobs   []map[string]float32 `json:"top_logprobs"`
}

// logprobsJSON renders entries in the format's shape; nil when the request
// did not ask for them.
func logprobsJSON(f format, piece func(int32) string, entries []tokenLogprob, asked bool) any {
	if !asked {
		return nil
	}
	if f.chat {
		c := &chatLogprobs{Content: make([]chatTokenLogprob, len(entries))}
		one := func(id int32, lp float32) chatAltLogprob {
			s := piece(id)
			b := make([]int, len(s))
			for i := range len(s) {
				b[i] = int(s[i])
			}
			return chatAltLogprob{Token: s, Logprob: lp, Bytes: b}
		}
		for i, e := range entries {
			c.Content[i] = chatTokenLogprob{chatAltLogprob: one(e.id, e.logprob), TopLogprobs: make([]chatAltLogprob, len(e.top))}
			for k, a := range e.top {
				c.Content[i].TopLogprobs[k] = one(a.id, a.logprob)
			}
		}
		return c
	}
	t := &textLogprobs{Tokens: make([]string, len(entries)), TokenLogprobs: make([]float32, len(entries)),
		TopLogprobs: make([]map[string]float32, len(entries))}
	for i, e := range entries {
		t.Tokens[i], t.TokenLogprobs[i] = piece(e.id), e.logprob
		t.TopLogprobs[i] = make(map[string]float32, len(e.top))
		// Two ids with one text share a key; the more likely is kept.
		for k := len(e.top) - 1; k >= 0; k-- {
			t.TopLogprobs[i][piece(e.top[k].id)] = e.top[k].logprob
		}
	}
	return t
}
