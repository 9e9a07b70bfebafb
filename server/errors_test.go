package server

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// errorOf reads an OpenAI error response with the given status.
func errorOf(t *testing.T, resp *http.Response, status int) errorObject {
	t.Helper()
	var e errorBody
	decodeBody(t, resp, status, &e)
	if e.Error.Message == "" || e.Error.Type == "" || e.Error.Code == "" {
		t.Errorf("error object %+v lacks a message, type or code", e.Error)
	}
	return e.Error
}

func TestBadRequests(t *testing.T) {
	s := newFake(t, Config{Model: fakeModel{ctx: 32}})
	ts := serve(t, s)
	cases := []struct{ path, body, code, msg string }{
		{"/v1/completions", `{"prompt": "x"`, "invalid_request", "malformed JSON"},
		{"/v1/completions", `{"prompt": "x"} {}`, "invalid_request", "more than one value"},
		{"/v1/completions", `[1, 2]`, "invalid_request", "malformed JSON"},
		{"/v1/completions", `{"prompt": "x", "max_tokens": "ten"}`, "invalid_request", `"max_tokens"`},
		{"/v1/completions", `{"prompt": "x", "max_tokens": 0}`, "invalid_request", "max_tokens 0"},
		{"/v1/completions", `{"prompt": "x", "temperature": -1}`, "invalid_request", "temperature"},
		{"/v1/completions", `{"prompt": "x", "top_p": 1.5}`, "invalid_request", "top_p"},
		{"/v1/completions", `{"prompt": "x", "top_k": -2}`, "invalid_request", "top_k"},
		{"/v1/completions", `{"prompt": "x", "presence_penalty": 3}`, "invalid_request", "presence_penalty"},
		{"/v1/completions", `{"prompt": "x", "n": 2}`, "invalid_request", "n 2"},
		{"/v1/completions", `{"prompt": "x", "stop": 5}`, "invalid_request", "stop"},
		{"/v1/completions", `{"prompt": "x", "stop": ["a", ""]}`, "invalid_request", "empty"},
		{"/v1/completions", `{"prompt": "x", "stop": ["a", "b", "c", "d", "e"]}`, "invalid_request", "at most 4"},
		{"/v1/completions", `{"prompt": "x", "stream_options": {"include_usage": true}}`, "invalid_request", "stream_options"},
		{"/v1/completions", `{"prompt": "x", "logprobs": 21}`, "invalid_request", "logprobs 21"},
		{"/v1/completions", `{"prompt": "x", "logprobs": 1.5}`, "invalid_request", "whole number"},
		{"/v1/completions", `{"prompt": "x", "logprobs": true}`, "invalid_request", "number of alternatives"},
		{"/v1/completions", `{"prompt": "x", "logprobs": 2, "top_logprobs": 2}`, "invalid_request", "top_logprobs"},
		{"/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}], "logprobs": 2}`, "invalid_request", "logprobs 2"},
		{"/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}], "logprobs": "yes"}`, "invalid_request", "logprobs: want"},
		{"/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}], "top_logprobs": 3}`, "invalid_request", "only allowed when logprobs"},
		{"/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 21}`, "invalid_request", "top_logprobs 21"},
		{"/v1/completions", `{}`, "invalid_request", "prompt: missing"},
		{"/v1/completions", `{"prompt": ["a", "b"]}`, "invalid_request", "2 prompts"},
		{"/v1/completions", `{"prompt": [1, 999]}`, "invalid_request", "token id 999"},
		{"/v1/completions", `{"prompt": [1, -1]}`, "invalid_request", "token id -1"},
		{"/v1/completions", `{"prompt": []}`, "invalid_request", "empty"},
		{"/v1/completions", `{"prompt": "` + strings.Repeat("x", 31) + `"}`, "context_length_exceeded", "32 tokens"},
		{"/v1/chat/completions", `{"messages": []}`, "invalid_request", "at least one"},
		{"/v1/chat/completions", `{"messages": [{"role": "wizard", "content": "x"}]}`, "invalid_request", "wizard"},
		{"/v1/chat/completions", `{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}`, "invalid_request", "image_url"},
		{"/v1/chat/completions", `{"messages": [{"role": "user", "content": 7}]}`, "invalid_request", "content"},
		{"/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}], "tools": [{}]}`, "invalid_request", "tools"},
		{"/v1/chat/completions", `{"messages": [{"role": "user", "content": "` + strings.Repeat("x", 40) + `"}]}`, "context_length_exceeded", "tokens"},
		{"/apply-template", `{"messages": "hi"}`, "invalid_request", "messages"},
	}
	for _, c := range cases {
		e := errorOf(t, post(t, context.Background(), ts.URL+c.path, "", c.body), http.StatusBadRequest)
		if e.Code != c.code || e.Type != "invalid_request_error" || !strings.Contains(e.Message, c.msg) {
			t.Errorf("%s %s: %+v, want code %s and a message with %q", c.path, c.body, e, c.code, c.msg)
		}
	}
}

func TestRoutes(t *testing.T) {
	s := newFake(t, Config{APIKey: "sesame"})
	ts := serve(t, s)
	do := func(method, path, key string) *http.Response {
		req, _ := http.NewRequest(method, ts.URL+path, strings.NewReader(`{"messages": [{"role": "user", "content": "hi"}]}`))
		if key != "" {
			req.Header.Set("Authorization", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for _, key := range []string{"", "Bearer wrong", "sesame", "Basic sesame"} {
		e := errorOf(t, do("POST", "/v1/chat/completions", key), http.StatusUnauthorized)
		if e.Code != "invalid_api_key" {
			t.Errorf("key %q: %+v", key, e)
		}
	}
	errorOf(t, do("GET", "/v1/models", "Bearer nope"), http.StatusUnauthorized)
	// /health needs no key.
	var h map[string]string
	decodeBody(t, do("GET", "/health", ""), 200, &h)
	if h["status"] != "ok" {
		t.Errorf("/health: %v", h)
	}
	var models struct {
		Object string
		Data   []struct{ ID, Object string }
	}
	decodeBody(t, do("GET", "/v1/models", "Bearer sesame"), 200, &models)
	if models.Object != "list" || len(models.Data) != 1 || models.Data[0].ID != "fake" || models.Data[0].Object != "model" {
		t.Errorf("/v1/models: %+v", models)
	}
	var tmpl map[string]string
	decodeBody(t, do("POST", "/apply-template", "Bearer sesame"), 200, &tmpl)
	if tmpl["prompt"] != "<user>hi\n<assistant>" {
		t.Errorf("/apply-template: %q", tmpl)
	}
	if e := errorOf(t, do("GET", "/v1/nothing", "Bearer sesame"), http.StatusNotFound); e.Code != "not_found" {
		t.Errorf("unknown route: %+v", e)
	}
	resp := do("GET", "/v1/chat/completions", "Bearer sesame")
	if allow := resp.Header.Get("Allow"); allow != "POST" {
		t.Errorf("405 Allow %q", allow)
	}
	if e := errorOf(t, resp, http.StatusMethodNotAllowed); e.Code != "method_not_allowed" {
		t.Errorf("wrong method: %+v", e)
	}
}

// TestQueueFull: with one slot and one queue place taken, a third request
// gets 503; once they are gone, requests are served again.
func TestQueueFull(t *testing.T) {
	eng := newFakeEngine(1, false)
	eng.gate = make(chan struct{})
	log := newLogLines()
	// A context no request can fill: the held ones end by their clients'
	// cancellation, which the server notices in its own time after the
	// gate opens, not by reaching the context's end first.
	s := newFake(t, Config{Engine: eng, Model: fakeModel{ctx: 1 << 24}, Queue: 1, Log: log})
	ts := serve(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	var held []*http.Response
	for range 2 {
		// Streams answer with headers once queued, before any token.
		resp := post(t, ctx, ts.URL+"/v1/completions", "", `{"prompt": "hold", "stream": true}`)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		held = append(held, resp)
	}
	if e := errorOf(t, post(t, context.Background(), ts.URL+"/v1/completions", "", `{"prompt": "x"}`), http.StatusServiceUnavailable); e.Code != "queue_full" {
		t.Errorf("%+v", e)
	}
	cancel()
	for _, r := range held {
		r.Body.Close()
	}
	close(eng.gate)
	// The scheduler logs each request once it is out of its slot or the
	// queue.
	for range held {
		if l := <-log.lines; !strings.Contains(l, "cancelled") {
			t.Fatalf("log line %q", l)
		}
	}
	var r struct{ Choices []struct{ Text string } }
	decodeBody(t, post(t, context.Background(), ts.URL+"/v1/completions", "", `{"prompt": "x", "max_tokens": 3}`), 200, &r)
	if len(r.Choices[0].Text) != 3 {
		t.Errorf("after the queue emptied: %+v", r)
	}
}

// TestDisconnect: a client that goes away mid-stream ends its generation
// (which would otherwise run to the end of a long context) and frees its
// slot for the next request.
func TestDisconnect(t *testing.T) {
	var log strings.Builder
	var mu sync.Mutex
	s := newFake(t, Config{Engine: newFakeEngine(1, false), Model: fakeModel{ctx: 1 << 24}, Queue: 1,
		Log: &lockedWriter{w: &log, mu: &mu}})
	ts := serve(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	resp := post(t, ctx, ts.URL+"/v1/completions", "", `{"prompt": "forever", "stream": true}`)
	buf := make([]byte, 64)
	if n, err := resp.Body.Read(buf); n == 0 {
		t.Fatalf("no first chunk: %v", err)
	}
	cancel()
	resp.Body.Close()
	var r struct{ Choices []struct{ Text string } }
	decodeBody(t, post(t, context.Background(), ts.URL+"/v1/completions", "", `{"prompt": "next", "max_tokens": 4}`), 200, &r)
	if len(r.Choices[0].Text) != 4 {
		t.Errorf("the next request: %+v", r)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(log.String(), "finish cancelled") {
		t.Errorf("the log does not show the cancelled request:\n%s", log.String())
	}
}

// TestShutdown: Close lets the request in flight finish, refuses new
// ones with 503, and returns once nothing is in flight.
func TestShutdown(t *testing.T) {
	eng := newFakeEngine(1, false)
	eng.gate = make(chan struct{})
	s := newFake(t, Config{Engine: eng})
	ts := serve(t, s)
	resp := post(t, context.Background(), ts.URL+"/v1/completions", "", `{"prompt": "last", "max_tokens": 5, "stream": true}`)
	s.sched.close() // what Close does before it waits
	if e := errorOf(t, post(t, context.Background(), ts.URL+"/v1/completions", "", `{"prompt": "x"}`), http.StatusServiceUnavailable); e.Code != "shutting_down" {
		t.Fatalf("%+v", e)
	}
	close(eng.gate)
	chunks, done := events(t, resp.Body)
	resp.Body.Close()
	var text string
	for _, c := range chunks {
		text += c["choices"].([]any)[0].(map[string]any)["text"].(string)
	}
	if !done || len(text) != 5 {
		t.Errorf("the stream in flight: %q, [DONE] %v", text, done)
	}
	s.Close()
}

// TestCancel: Cancel ends a stream in flight with an error event and no
// [DONE], and Close then returns.
func TestCancel(t *testing.T) {
	eng := newFakeEngine(1, false)
	eng.gate = make(chan struct{})
	s := newFake(t, Config{Engine: eng, Model: fakeModel{ctx: 1 << 24}})
	ts := serve(t, s)
	resp := post(t, context.Background(), ts.URL+"/v1/chat/completions", "", `{"messages": [{"role": "user", "content": "go on"}], "stream": true}`)
	s.Cancel()
	close(eng.gate)
	chunks, done := events(t, resp.Body)
	resp.Body.Close()
	last := chunks[len(chunks)-1]
	if done || last["error"] == nil {
		t.Errorf("after Cancel: [DONE] %v, last event %v", done, last)
	}
	s.Close()
}

// logLines is a Config.Log that hands each line to the test.
type logLines struct{ lines chan string }

func newLogLines() *logLines { return &logLines{lines: make(chan string, 100)} }

func (l *logLines) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimSuffix(string(p), "\n"), "\n") {
		l.lines <- line
	}
	return len(p), nil
}
