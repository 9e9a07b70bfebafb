package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/vkinfer/vkinfer/model/sample"
)

// FuzzRequest sends arbitrary bodies to the generation endpoints: the
// server must answer every one with 200 or an OpenAI error object (400),
// never a panic or a 500. The seeds below run as a test in every `go
// test`; `go test -fuzz FuzzRequest ./server` explores from them.
func FuzzRequest(f *testing.F) {
	for _, seed := range []string{
		`{"prompt": "hello", "max_tokens": 4}`,
		`{"prompt": [256, 104, 105], "max_tokens": 2, "stop": "i"}`,
		`{"prompt": ["one"], "temperature": 0.5, "top_k": 3, "top_p": 0.9, "min_p": 0.1, "seed": 9, "max_tokens": 3}`,
		`{"prompt": "x", "stream": true, "stream_options": {"include_usage": true}, "max_tokens": 2}`,
		`{"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 3}`,
		`{"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}]}], "stop": ["b", "c"], "max_tokens": 5}`,
		`{"messages": [{"role": "assistant", "content": null}], "presence_penalty": 1, "frequency_penalty": -1, "repeat_penalty": 1.1, "max_tokens": 2}`,
		`{"prompt": "x", "max_tokens": 1e400}`,
		`{"prompt": "x", "seed": -1, "max_tokens": 1}`,
		`{"prompt": "\u0000\ud800", "max_tokens": 1}`,
		`{"messages": [{"role": "user"}], "logprobs": false, "n": 1, "max_tokens": 1}`,
		`{"prompt": {"a": 1}}`, `null`, `""`, `{`, `{"messages": [null]}`, `{"prompt": [1.5]}`,
	} {
		f.Add(seed)
	}
	s := newFakeServer(f)
	f.Fuzz(func(t *testing.T, body string) {
		for _, path := range []string{"/v1/completions", "/v1/chat/completions", "/apply-template"} {
			w := httptest.NewRecorder()
			s.ServeHTTP(w, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
			switch w.Code {
			case http.StatusOK:
				if strings.HasPrefix(w.Header().Get("Content-Type"), "text/event-stream") {
					if !strings.HasSuffix(w.Body.String(), "data: [DONE]\n\n") {
						t.Errorf("%s %q: a stream without [DONE]: %q", path, body, w.Body.String())
					}
					continue
				}
			case http.StatusBadRequest:
				var e errorBody
				if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error.Message == "" {
					t.Errorf("%s %q: 400 without an error object: %q", path, body, w.Body.String())
				}
				continue
			default:
				t.Errorf("%s %q: status %d: %s", path, body, w.Code, w.Body.String())
				continue
			}
			if !json.Valid(w.Body.Bytes()) {
				t.Errorf("%s %q: invalid JSON: %q", path, body, w.Body.String())
			}
		}
	})
}

// newFakeServer is newFake for a testing.F.
func newFakeServer(f *testing.F) *Server {
	s, err := New(Config{Model: fakeModel{ctx: 64}, Engine: newFakeEngine(1, true), Parallel: 2, Queue: 64,
		Defaults: sample.Defaults()})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(s.Close)
	return s
}
