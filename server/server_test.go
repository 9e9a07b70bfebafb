package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vkinfer/vkinfer/model/sample"
)

// serve runs s behind an httptest server, closed with the test.
func serve(t *testing.T, s *Server) *httptest.Server {
	t.Helper()
	ts := httptest.NewServer(s)
	t.Cleanup(func() {
		s.Cancel()
		ts.Close()
		s.Close()
	})
	return ts
}

func post(t *testing.T, ctx context.Context, url, key, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// decodeBody reads a whole JSON response into v, checking the status.
func decodeBody(t *testing.T, resp *http.Response, status int, v any) {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d: %s", resp.StatusCode, status, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
}

// events reads server-sent events until [DONE] or the end of the body;
// done says whether [DONE] came, and came last.
func events(t *testing.T, body io.Reader) (chunks []map[string]any, done bool) {
	t.Helper()
	sc := bufio.NewScanner(body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("not an SSE data line: %q", line)
		}
		if done {
			t.Fatalf("an event after [DONE]: %q", line)
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		var c map[string]any
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("event %q: %v", data, err)
		}
		chunks = append(chunks, c)
	}
	return chunks, done
}

func TestCompletionGreedy(t *testing.T) {
	s := newFake(t, Config{})
	ts := serve(t, s)
	var r struct {
		ID, Object, Model string
		Choices           []struct {
			Index        int
			Text         string
			FinishReason string `json:"finish_reason"`
		}
		Usage usage
	}
	decodeBody(t, post(t, context.Background(), ts.URL+"/v1/completions", "",
		`{"prompt": "hello", "max_tokens": 40, "temperature": 0}`), 200, &r)
	sp := sample.Defaults()
	sp.Temp = 0
	want := fakeGreedy("hello", sp, 40, 256, true)
	if len(r.Choices) != 1 || r.Choices[0].Text != want {
		t.Fatalf("choices %+v, want text %q", r.Choices, want)
	}
	reason := "length"
	if len(want) < 40 {
		reason = "stop"
	}
	if r.Object != "text_completion" || r.Model != "fake" || !strings.HasPrefix(r.ID, "cmpl-") || r.Choices[0].FinishReason != reason {
		t.Errorf("response %+v, finish reason want %q", r, reason)
	}
	gen := len(want)
	if reason == "stop" {
		gen++ // EOS counts
	}
	if r.Usage != (usage{PromptTokens: 6, CompletionTokens: gen, TotalTokens: 6 + gen}) {
		t.Errorf("usage %+v, want 6 prompt tokens and %d completion tokens", r.Usage, gen)
	}
}

// TestChatStream: a streamed chat arrives in several chunks in OpenAI's
// shapes (the role first, deltas, the finish reason, usage), ends with
// [DONE], and its text is the non-streamed answer's.
func TestChatStream(t *testing.T) {
	s := newFake(t, Config{})
	ts := serve(t, s)
	const msgs = `"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": [{"type": "text", "text": "hi "}, {"type": "text", "text": "there"}]}]`
	var whole struct {
		Object  string
		Choices []struct {
			Message      struct{ Role, Content string }
			FinishReason string `json:"finish_reason"`
		}
		Usage usage
	}
	decodeBody(t, post(t, context.Background(), ts.URL+"/v1/chat/completions", "", `{`+msgs+`, "seed": 3}`), 200, &whole)
	if whole.Object != "chat.completion" || len(whole.Choices) != 1 || whole.Choices[0].Message.Role != "assistant" {
		t.Fatalf("response %+v", whole)
	}
	prompt, _ := fakeModel{}.ApplyTemplate([]Message{{"system", "be brief"}, {"user", "hi there"}})
	sp := sample.Defaults()
	sp.Seed = 3
	if want := fakeGreedy(prompt, sp, -1, 256, true); whole.Choices[0].Message.Content != want {
		t.Fatalf("content %q, want %q", whole.Choices[0].Message.Content, want)
	}

	resp := post(t, context.Background(), ts.URL+"/v1/chat/completions", "", `{`+msgs+`, "seed": 3, "stream": true, "stream_options": {"include_usage": true}}`)
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	chunks, done := events(t, resp.Body)
	if !done {
		t.Fatal("no [DONE] at the end")
	}
	if len(chunks) < 4 {
		t.Fatalf("%d chunks: %v", len(chunks), chunks)
	}
	var text strings.Builder
	for i, c := range chunks {
		if c["object"] != "chat.completion.chunk" {
			t.Errorf("chunk %d: object %v", i, c["object"])
		}
		choices := c["choices"].([]any)
		if i == len(chunks)-1 {
			var u usage
			b, _ := json.Marshal(c["usage"])
			if json.Unmarshal(b, &u); len(choices) != 0 || u != whole.Usage {
				t.Errorf("last chunk %v: want no choices and usage %+v", c, whole.Usage)
			}
			continue
		}
		ch := choices[0].(map[string]any)
		delta := ch["delta"].(map[string]any)
		if i == 0 && delta["role"] != "assistant" {
			t.Errorf("first chunk %v: no role", c)
		}
		if i == len(chunks)-2 {
			if ch["finish_reason"] != whole.Choices[0].FinishReason {
				t.Errorf("finish chunk %v, want finish reason %q", c, whole.Choices[0].FinishReason)
			}
		} else if ch["finish_reason"] != nil {
			t.Errorf("chunk %d has a finish reason: %v", i, c)
		}
		if s, ok := delta["content"].(string); ok {
			text.WriteString(s)
		}
	}
	if text.String() != whole.Choices[0].Message.Content {
		t.Errorf("streamed %q, whole %q", text.String(), whole.Choices[0].Message.Content)
	}
}

// TestStop: stop strings cut the text, whole and streamed, and no part of
// one reaches the client.
func TestStop(t *testing.T) {
	s := newFake(t, Config{Engine: newFakeEngine(1, false)})
	ts := serve(t, s)
	sp := sample.Defaults()
	sp.Temp = 0
	full := fakeGreedy("stop test", sp, 60, 256, false)
	// Stop at the first occurrence of a two-letter string from the middle.
	stop := full[30:32]
	want := full[:strings.Index(full, stop)]
	for _, stream := range []bool{false, true} {
		body := fmt.Sprintf(`{"prompt": "stop test", "max_tokens": 60, "temperature": 0, "stop": ["zzzz", %q], "stream": %v}`, stop, stream)
		resp := post(t, context.Background(), ts.URL+"/v1/completions", "", body)
		var text, reason string
		if stream {
			chunks, done := events(t, resp.Body)
			resp.Body.Close()
			if !done {
				t.Fatal("no [DONE]")
			}
			for _, c := range chunks {
				ch := c["choices"].([]any)[0].(map[string]any)
				text += ch["text"].(string)
				if r, ok := ch["finish_reason"].(string); ok {
					reason = r
				}
			}
		} else {
			var r struct {
				Choices []struct {
					Text         string
					FinishReason string `json:"finish_reason"`
				}
			}
			decodeBody(t, resp, 200, &r)
			text, reason = r.Choices[0].Text, r.Choices[0].FinishReason
		}
		if text != want || reason != "stop" {
			t.Errorf("stream %v: text %q (%s), want %q cut at %q of %q", stream, text, reason, want, stop, full)
		}
	}
}

func TestTextStream(t *testing.T) {
	cases := []struct {
		text  string
		stop  []string
		sent  []string // after each byte
		final string
		hit   bool
	}{
		{"abcdef", []string{"cd"}, []string{"a", "b", "", ""}, "", true},
		{"abcabd", []string{"abd"}, []string{"", "", "abc", "", "", ""}, "", true},
		{"xyab", []string{"abc"}, []string{"x", "y", "", ""}, "ab", false},
		{"hello", nil, []string{"h", "e", "l", "l", "o"}, "", false},
		{"aXbY", []string{"Y", "bY"}, []string{"a", "X", "", ""}, "", true},
	}
	for _, c := range cases {
		ts := newTextStream(byteDecoder{}, c.stop)
		var got []string
		hit := false
		for i := 0; i < len(c.text) && !hit; i++ {
			var s string
			s, hit = ts.add(int32(c.text[i]))
			got = append(got, s)
		}
		final := ""
		if !hit {
			final = ts.flush()
		}
		if strings.Join(got, "|") != strings.Join(c.sent, "|") || final != c.final || hit != c.hit {
			t.Errorf("%q stop %q: sent %q, final %q, hit %v; want %q, %q, %v", c.text, c.stop, got, final, hit, c.sent, c.final, c.hit)
		}
	}
}

// TestConcurrentEqualsSingle: eight streams at once over four slots, each
// give what they give alone: over one or two caches, switching sequences
// every step (every switch re-evaluates only what the cache lacks); over
// four, each slot keeping its cache and all four evaluated together.
func TestConcurrentEqualsSingle(t *testing.T) {
	for _, seqs := range []int{1, 2, 4} {
		t.Run(fmt.Sprint(seqs, " caches"), func(t *testing.T) { testConcurrent(t, seqs) })
	}
}

func testConcurrent(t *testing.T, seqs int) {
	eng := newFakeEngine(seqs, true)
	s := newFake(t, Config{Engine: eng, Parallel: 4, Queue: 8, Quantum: 1})
	ts := serve(t, s)
	type result struct{ text, reason string }
	// start sends request i; its response's headers say it is queued.
	start := func(i int) *http.Response {
		body := fmt.Sprintf(`{"prompt": "prompt number %d", "max_tokens": %d, "temperature": 0.9, "seed": %d, "stream": true}`, i, 20+i, i)
		return post(t, context.Background(), ts.URL+"/v1/completions", "", body)
	}
	read := func(resp *http.Response) result {
		defer resp.Body.Close()
		chunks, done := events(t, resp.Body)
		var r result
		for _, c := range chunks {
			ch := c["choices"].([]any)[0].(map[string]any)
			r.text += ch["text"].(string)
			if f, ok := ch["finish_reason"].(string); ok {
				r.reason = f
			}
		}
		if !done {
			r.reason += " (no [DONE])"
		}
		return r
	}
	single := make([]result, 8)
	for i := range single {
		single[i] = read(start(i))
	}
	// All eight are in flight before the engine takes a step.
	eng.mu.Lock()
	eng.calls = nil
	eng.gate = make(chan struct{})
	eng.mu.Unlock()
	resps := make([]*http.Response, 8)
	var wg sync.WaitGroup
	for i := range resps {
		wg.Go(func() { resps[i] = start(i) })
	}
	wg.Wait()
	close(eng.gate)
	together := make([]result, 8)
	for i := range together {
		wg.Go(func() { together[i] = read(resps[i]) })
	}
	wg.Wait()
	for i := range single {
		if together[i] != single[i] {
			t.Errorf("stream %d: %+v concurrently, %+v alone", i, together[i], single[i])
		}
	}
	// Evaluations of more than the newest token: the eight prompts, and
	// the sequences that came back into a cache after another.
	evals := 0
	for _, c := range eng.calls {
		if len(c.Tokens)-c.Reused > 1 {
			evals++
		}
	}
	switch {
	case seqs < 4 && evals <= 8:
		t.Errorf("%d evaluations of more than one token over %d caches: the test did not interleave", evals, seqs)
	case seqs == 4 && evals > 8:
		t.Errorf("%d evaluations of more than one token over a cache per slot: sequences lost their caches", evals)
	}
	if eng.widest != seqs {
		t.Errorf("at most %d sequences evaluated together, want %d", eng.widest, seqs)
	}
}

// TestPrefixReuse: a request that extends a slot's conversation goes to
// that slot, and evaluates only what the cache lacks; an unrelated one
// takes the least recently used slot.
func TestPrefixReuse(t *testing.T) {
	eng := newFakeEngine(1, false)
	var log bytes.Buffer
	var logMu sync.Mutex
	s := newFake(t, Config{Engine: eng, Parallel: 2, Log: &lockedWriter{w: &log, mu: &logMu}})
	ts := serve(t, s)
	// complete returns the text and the first evaluation of the request.
	complete := func(prompt string) (string, Seq) {
		eng.mu.Lock()
		eng.calls = nil
		eng.mu.Unlock()
		var r struct{ Choices []struct{ Text string } }
		decodeBody(t, post(t, context.Background(), ts.URL+"/v1/completions", "",
			fmt.Sprintf(`{"prompt": %q, "max_tokens": 8, "temperature": 0}`, prompt)), 200, &r)
		eng.mu.Lock()
		defer eng.mu.Unlock()
		for i, c := range eng.calls[1:] {
			if len(c.Tokens)-c.Reused != 1 {
				t.Errorf("%q: decode step %d evaluated %d tokens", prompt, i, len(c.Tokens)-c.Reused)
			}
		}
		return r.Choices[0].Text, eng.calls[0]
	}
	a := "a conversation"
	a1, _ := complete(a)
	complete(strings.Repeat("z", 30)) // shares only BOS with slot 0: slot 1
	a2, first := complete(a + a1 + " and more")
	// Over one cache the engine held the other conversation: only BOS
	// was reused. The slot's choice is what a multi-sequence backend needs.
	if first.Reused != 1 {
		t.Errorf("after a switch, reused %d tokens, want 1 (BOS)", first.Reused)
	}
	prompt := a + a1 + " and more" + a2
	_, first = complete(prompt + "!")
	// The sampled last token of a2 was never evaluated.
	if want := len(fakeModel{}.Tokenize(prompt)) - 1; first.Reused != want {
		t.Errorf("an extended conversation reused %d of %d tokens, want %d", first.Reused, len(first.Tokens), want)
	}
	logMu.Lock()
	defer logMu.Unlock()
	var slots []string
	for _, l := range strings.Split(strings.TrimSpace(log.String()), "\n") {
		slots = append(slots, strings.Fields(l)[3])
	}
	if strings.Join(slots, " ") != "0: 1: 0: 0:" {
		t.Errorf("requests went to slots %v, want 0 1 0 0:\n%s", slots, log.String())
	}
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestIgnoreEOS: with ignore_eos, generation runs past end-of-generation
// tokens to max_tokens.
func TestIgnoreEOS(t *testing.T) {
	s := newFake(t, Config{})
	ts := serve(t, s)
	for _, c := range []struct {
		ignore bool
		reason string
	}{{false, "stop"}, {true, "length"}} {
		var r struct {
			Choices []struct {
				FinishReason string `json:"finish_reason"`
			}
			Usage usage
		}
		// "z." ends the fake's text at once: '.' is followed by EOS.
		decodeBody(t, post(t, context.Background(), ts.URL+"/v1/completions", "",
			fmt.Sprintf(`{"prompt": "z.", "max_tokens": 30, "ignore_eos": %v}`, c.ignore)), 200, &r)
		if r.Choices[0].FinishReason != c.reason || c.ignore && r.Usage.CompletionTokens != 30 {
			t.Errorf("ignore_eos %v: %+v", c.ignore, r)
		}
	}
}

// TestIdleCachesFirst: with a cache per slot, requests that arrive while
// another runs take the idle caches; the running one keeps its own and
// never re-evaluates, however short the quantum.
func TestIdleCachesFirst(t *testing.T) {
	eng := newFakeEngine(4, false)
	// A step a millisecond: the first request runs for 150 ms, long after
	// the others arrive.
	eng.gate = make(chan struct{})
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case eng.gate <- struct{}{}:
				time.Sleep(time.Millisecond)
			case <-stop:
				return
			}
		}
	}()
	s := newFake(t, Config{Engine: eng, Parallel: 4, Quantum: 1})
	ts := serve(t, s)
	start := func(prompt string, n int) *http.Response {
		return post(t, context.Background(), ts.URL+"/v1/completions", "",
			fmt.Sprintf(`{"prompt": %q, "max_tokens": %d, "temperature": 0, "stream": true}`, prompt, n))
	}
	first := start("the first", 150)
	defer first.Body.Close()
	if _, err := bufio.NewReader(first.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() {
			resp := start(fmt.Sprintf("another %d", i), 10)
			defer resp.Body.Close()
			events(t, resp.Body)
		})
	}
	wg.Wait()
	events(t, first.Body)
	eng.mu.Lock()
	defer eng.mu.Unlock()
	prompt := fakeModel{}.Tokenize("the first")
	for _, c := range eng.calls {
		if len(c.Tokens) > len(prompt) && slices.Equal(c.Tokens[:len(prompt)], prompt) && len(c.Tokens)-c.Reused > 1 {
			t.Fatalf("the first request re-evaluated %d tokens in cache %d: it lost its cache", len(c.Tokens)-c.Reused, c.Cache)
		}
	}
}
