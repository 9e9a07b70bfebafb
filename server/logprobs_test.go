package server

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/vkinfer/vkinfer/model/sample"
)

// fakeLogprobs replays the fake model's greedy run of prompt and returns,
// for each generated token, log-softmax of its position's logits computed
// in float64, with the tokens in order of their logits.
func fakeLogprobs(prompt string, maxTokens int) (tokens []int32, lps [][]float64, order [][]int32) {
	toks := fakeModel{}.Tokenize(prompt)
	s := sample.New(sample.Params{})
	logits := make([]float32, fakeVocab)
	for n := 0; n < maxTokens; n++ {
		fakeLogits(toks, true, logits)
		var sum float64
		for _, v := range logits {
			sum += math.Exp(float64(v))
		}
		lp := make([]float64, len(logits))
		ids := make([]int32, len(logits))
		for i, v := range logits {
			lp[i], ids[i] = float64(v)-math.Log(sum), int32(i)
		}
		// Most likely first, the lower id first among equals.
		for i := 1; i < len(ids); i++ {
			for j := i; j > 0 && (lp[ids[j]] > lp[ids[j-1]] || lp[ids[j]] == lp[ids[j-1]] && ids[j] < ids[j-1]); j-- {
				ids[j], ids[j-1] = ids[j-1], ids[j]
			}
		}
		id := s.Sample(logits)
		if id == fakeEOS {
			break
		}
		toks = append(toks, id)
		tokens, lps, order = append(tokens, id), append(lps, lp), append(order, ids)
	}
	return tokens, lps, order
}

// TestLogprobs: completions' logprobs N and chat's logprobs with
// top_logprobs report each generated token (not the end of generation)
// with log-softmax of the logits and the N most likely tokens, whole and
// streamed alike; without them the field is null.
func TestLogprobs(t *testing.T) {
	ts := serve(t, newFake(t, Config{}))
	const prompt, n = "hello", 12
	tokens, lps, order := fakeLogprobs(prompt, n)
	near := func(got float32, want float64) bool {
		return math.Abs(float64(got)-want) <= 1e-5*max(1, math.Abs(want))
	}

	t.Run("completions", func(t *testing.T) {
		var r struct {
			Choices []struct {
				Text     string
				Logprobs *textLogprobs
			}
		}
		decodeBody(t, post(t, context.Background(), ts.URL+"/v1/completions", "",
			fmt.Sprintf(`{"prompt": %q, "max_tokens": %d, "temperature": 0, "logprobs": 3}`, prompt, n)), 200, &r)
		lp := r.Choices[0].Logprobs
		if lp == nil || len(lp.Tokens) != len(tokens) || len(lp.TokenLogprobs) != len(tokens) || len(lp.TopLogprobs) != len(tokens) {
			t.Fatalf("logprobs %+v for %d tokens", lp, len(tokens))
		}
		if got := strings.Join(lp.Tokens, ""); got != r.Choices[0].Text {
			t.Errorf("tokens %q, text %q", got, r.Choices[0].Text)
		}
		for i, id := range tokens {
			if !near(lp.TokenLogprobs[i], lps[i][id]) {
				t.Errorf("token %d: logprob %v, want %v", i, lp.TokenLogprobs[i], lps[i][id])
			}
			if len(lp.TopLogprobs[i]) != 3 {
				t.Errorf("token %d: %d alternatives, want 3", i, len(lp.TopLogprobs[i]))
			}
			for _, alt := range order[i][:3] {
				if v, ok := lp.TopLogprobs[i][string([]byte{byte(alt)})]; !ok || !near(v, lps[i][alt]) {
					t.Errorf("token %d: alternative %q: %v (%v), want %v", i, alt, v, ok, lps[i][alt])
				}
			}
		}
	})

	chat := func(t *testing.T, stream bool) []chatTokenLogprob {
		body := fmt.Sprintf(`{"messages": [{"role": "user", "content": %q}], "max_tokens": %d, "temperature": 0, "logprobs": true, "top_logprobs": 2, "stream": %v}`, prompt, n, stream)
		resp := post(t, context.Background(), ts.URL+"/v1/chat/completions", "", body)
		if !stream {
			var r struct {
				Choices []struct{ Logprobs *chatLogprobs }
			}
			decodeBody(t, resp, 200, &r)
			if r.Choices[0].Logprobs == nil {
				t.Fatal("no logprobs")
			}
			return r.Choices[0].Logprobs.Content
		}
		defer resp.Body.Close()
		chunks, done := events(t, resp.Body)
		if !done {
			t.Fatal("no [DONE]")
		}
		var all []chatTokenLogprob
		for _, c := range chunks {
			for _, ch := range c["choices"].([]any) {
				lp := ch.(map[string]any)["logprobs"]
				if lp == nil {
					continue
				}
				b, _ := json.Marshal(lp)
				var l chatLogprobs
				if err := json.Unmarshal(b, &l); err != nil {
					t.Fatal(err)
				}
				all = append(all, l.Content...)
			}
		}
		return all
	}
	t.Run("chat", func(t *testing.T) {
		whole, streamed := chat(t, false), chat(t, true)
		if len(whole) == 0 || len(whole) != len(streamed) {
			t.Fatalf("%d entries whole, %d streamed", len(whole), len(streamed))
		}
		for i := range whole {
			w, s := whole[i], streamed[i]
			if w.Token != s.Token || w.Logprob != s.Logprob || len(w.TopLogprobs) != 2 || len(s.TopLogprobs) != 2 {
				t.Fatalf("entry %d: whole %+v, streamed %+v", i, w, s)
			}
			// Greedy: the chosen token is the most likely.
			if w.Token != w.TopLogprobs[0].Token || w.Logprob != w.TopLogprobs[0].Logprob || w.TopLogprobs[1].Logprob > w.Logprob {
				t.Errorf("entry %d: %+v", i, w)
			}
			if len(w.Bytes) != len(w.Token) || w.Token != "" && w.Bytes[0] != int(w.Token[0]) {
				t.Errorf("entry %d: bytes %v of %q", i, w.Bytes, w.Token)
			}
		}
	})

	t.Run("off", func(t *testing.T) {
		var r struct {
			Choices []map[string]any
		}
		decodeBody(t, post(t, context.Background(), ts.URL+"/v1/completions", "",
			`{"prompt": "hi", "max_tokens": 3, "logprobs": false}`), 200, &r)
		if v, ok := r.Choices[0]["logprobs"]; !ok || v != nil {
			t.Errorf("logprobs %v (present %v), want null", v, ok)
		}
	})
}

// TestExpSum checks expSum against float64 math.Exp: logits of several
// spreads (the sum then led by one term, or by thousands), a vocabulary of
// one, logits far below the max, and −Inf (a banned token).
func TestExpSum(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, c := range []struct {
		n     int
		scale float64
	}{{1, 1}, {7, 0.01}, {1000, 1}, {151936, 4}, {151936, 40}, {32000, 300}} {
		logits := make([]float32, c.n)
		for i := range logits {
			logits[i] = float32(r.NormFloat64() * c.scale)
		}
		if c.n > 10 {
			logits[3] = float32(math.Inf(-1))
		}
		mx := float32(math.Inf(-1))
		for _, v := range logits {
			mx = max(mx, v)
		}
		var want float64
		for _, v := range logits {
			want += math.Exp(float64(v) - float64(mx))
		}
		got := expSum(logits, mx)
		if e := math.Abs(got-want) / want; !(e <= 4e-7) {
			t.Errorf("%d logits of spread %g: expSum %v, want %v (relative error %.3g)", c.n, c.scale, got, want, e)
		}
	}
}

// BenchmarkExpSum is what logprobs cost per sampled token at Qwen3's
// vocabulary.
func BenchmarkExpSum(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	logits := make([]float32, 151936)
	for i := range logits {
		logits[i] = float32(r.NormFloat64() * 4)
	}
	for range b.N {
		expSum(logits, 20)
	}
}
