// Package server is vkinfer's OpenAI-compatible HTTP API (infer serve):
// /v1/chat/completions and /v1/completions (streamed as server-sent events
// on request), /v1/models, /health and llama-server's /apply-template, over
// a scheduler that runs every request in flight one token per step.
package server

import (
	"crypto/subtle"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/vkinfer/vkinfer/model/sample"
)

// Model is what the server needs of a loaded model besides evaluation.
type Model interface {
	Name() string // the id /v1/models lists
	Context() int // tokens of prompt and completion together
	VocabSize() int
	// Tokenize encodes a prompt: BOS where the model adds one, the texts
	// of special tokens read as those tokens (a rendered chat template
	// holds them).
	Tokenize(text string) []int32
	NewDecoder() Decoder
	// Piece is a token's own bytes, which may be part of a UTF-8
	// sequence (logprobs report tokens one by one).
	Piece(id int32) string
	IsEOG(id int32) bool
	// ApplyTemplate renders a conversation with the model's chat template
	// and the generation prompt after it.
	ApplyTemplate(msgs []Message) (string, error)
}

// Message is one chat message as the template takes it.
type Message struct{ Role, Content string }

// Config sets up a Server.
type Config struct {
	Model    Model
	Engine   Engine
	Parallel int // slots: requests generating at once
	Queue    int // requests waiting beyond the slots before 503s
	// Quantum is how many tokens a sequence decodes while holding a KV
	// cache that others wait for (0: 32): switching sequences
	// re-evaluates the incoming one, so a short quantum is fair but slow.
	Quantum int
	APIKey  string // "": no key needed
	// Defaults are the sampling parameters a request leaves out; a
	// request without a seed gets a random one when Seed is negative.
	Defaults sample.Params
	Seed     int64
	Log      io.Writer // one timings line per request; nil: none
}

// Server serves the API; it is an http.Handler.
type Server struct {
	cfg     Config
	sched   *scheduler
	routes  map[string]route
	created int64

	rngMu sync.Mutex
	rng   *rand.Rand
}

type route struct {
	method string
	handle func(w http.ResponseWriter, r *http.Request) error
	public bool // served without the API key
}

// New starts the server's scheduler; Close stops it.
func New(cfg Config) (*Server, error) {
	if cfg.Parallel < 1 {
		return nil, fmt.Errorf("server: %d slots: want at least 1", cfg.Parallel)
	}
	if cfg.Queue < 0 {
		return nil, fmt.Errorf("server: a queue of %d: want 0 or more", cfg.Queue)
	}
	if cfg.Engine.Seqs() < 1 {
		return nil, fmt.Errorf("server: the engine holds %d sequences", cfg.Engine.Seqs())
	}
	if cfg.Quantum <= 0 {
		cfg.Quantum = 32
	}
	s := &Server{cfg: cfg, created: time.Now().Unix(), rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))}
	s.sched = newScheduler(schedulerConfig{engine: cfg.Engine, model: cfg.Model, parallel: cfg.Parallel,
		queue: cfg.Queue, quantum: cfg.Quantum, log: cfg.Log})
	s.routes = map[string]route{
		"/v1/chat/completions": {method: http.MethodPost, handle: s.completion(s.chatPrompt, chatFormat)},
		"/v1/completions":      {method: http.MethodPost, handle: s.completion(s.textPrompt, textFormat)},
		"/v1/models":           {method: http.MethodGet, handle: s.models},
		"/apply-template":      {method: http.MethodPost, handle: s.applyTemplate},
		"/health":              {method: http.MethodGet, handle: s.health, public: true},
	}
	go s.sched.run()
	return s, nil
}

// Close stops accepting requests (they get 503) and waits until those in
// flight have finished, or ended because their clients went away.
func (s *Server) Close() {
	s.sched.close()
	<-s.sched.idle
}

// Cancel ends every request in flight now (streams get an error event):
// for a shutdown that cannot wait for them.
func (s *Server) Cancel() { s.sched.cancelAll() }

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Browser front ends call the API from other origins, as they do
	// llama-server's.
	w.Header().Set("Access-Control-Allow-Origin", "*")
	rt, ok := s.routes[r.URL.Path]
	if !ok {
		writeError(w, errNotFound)
		return
	}
	if r.Method == http.MethodOptions {
		w.Header().Set("Access-Control-Allow-Methods", rt.method+", OPTIONS")
		w.Header().Set("Access-Control-Allow-Headers", "Authorization, Content-Type")
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if r.Method != rt.method && !(rt.method == http.MethodGet && r.Method == http.MethodHead) {
		w.Header().Set("Allow", rt.method)
		writeError(w, methodNotAllowed(rt.method))
		return
	}
	if !rt.public && !s.authorized(r) {
		writeError(w, errUnauthorized)
		return
	}
	if err := rt.handle(w, r); err != nil {
		writeError(w, err)
	}
}

// authorized checks the Bearer key, in constant time.
func (s *Server) authorized(r *http.Request) bool {
	if s.cfg.APIKey == "" {
		return true
	}
	key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(key), []byte(s.cfg.APIKey)) == 1
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	return nil
}

func (s *Server) models(w http.ResponseWriter, r *http.Request) error {
	type modelEntry struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	writeJSON(w, http.StatusOK, struct {
		Object string       `json:"object"`
		Data   []modelEntry `json:"data"`
	}{"list", []modelEntry{{s.cfg.Model.Name(), "model", s.created, "vkinfer"}}})
	return nil
}

func (s *Server) applyTemplate(w http.ResponseWriter, r *http.Request) error {
	req, err := decodeRequest(r.Body)
	if err != nil {
		return err
	}
	prompt, err := s.render(req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]string{"prompt": prompt})
	return nil
}

// render checks a request's messages and renders them with the template.
func (s *Server) render(req *request) (string, error) {
	msgs, err := req.messages()
	if err != nil {
		return "", err
	}
	prompt, err := s.cfg.Model.ApplyTemplate(msgs)
	if err != nil {
		return "", invalid("applying the chat template: %v", err)
	}
	return prompt, nil
}

// completion is the handler of a generation endpoint: both decode and
// validate the body the same way and differ only in how the prompt's
// tokens come from the request and in the response's shapes.
func (s *Server) completion(promptOf func(*request) ([]int32, error), f format) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		req, err := decodeRequest(r.Body)
		if err != nil {
			return err
		}
		p, err := req.validate(f.chat)
		if err != nil {
			return err
		}
		prompt, err := promptOf(req)
		if err != nil {
			return err
		}
		return s.generate(w, r, p, prompt, f)
	}
}

// chatPrompt is /v1/chat/completions' prompt: the messages through the
// chat template.
func (s *Server) chatPrompt(req *request) ([]int32, error) {
	prompt, err := s.render(req)
	if err != nil {
		return nil, err
	}
	return s.cfg.Model.Tokenize(prompt), nil
}

// textPrompt is /v1/completions' prompt: a text, tokenized, or token ids,
// each checked against the vocabulary.
func (s *Server) textPrompt(req *request) ([]int32, error) {
	text, ids, err := req.prompt()
	if err != nil {
		return nil, err
	}
	if ids == nil {
		ids = s.cfg.Model.Tokenize(text)
	}
	for _, id := range ids {
		if int(id) >= s.cfg.Model.VocabSize() {
			return nil, invalid("prompt: token id %d out of range (the vocabulary has %d)", id, s.cfg.Model.VocabSize())
		}
	}
	return ids, nil
}

// generate runs a validated request and writes its response, streamed or
// whole.
func (s *Server) generate(w http.ResponseWriter, r *http.Request, p params, prompt []int32, f format) error {
	switch ctx := s.cfg.Model.Context(); {
	case len(prompt) == 0:
		return invalid("the prompt is empty and the model adds no BOS token: nothing to evaluate")
	case len(prompt) >= ctx:
		return tooLong(len(prompt), ctx)
	}
	g := genRequest{prompt: prompt, maxTokens: p.maxTokens, sampling: s.sampling(p), stop: p.stop, ignoreEOS: p.ignoreEOS,
		logprobs: -1}
	if p.logprobs {
		g.logprobs = p.topLogprobs
	}
	out, err := s.sched.submit(r.Context(), g)
	if err != nil {
		return err
	}
	id := f.idPrefix + fmt.Sprintf("%016x", s.random())
	if p.stream {
		return s.stream(w, r, out, p, f.newResponse(id, s.cfg.Model.Name()))
	}
	var text strings.Builder
	var lps []tokenLogprob
	for {
		part, err := out.next(r.Context())
		if err != nil {
			return nil // the client has gone: nobody to answer
		}
		text.WriteString(part.text)
		lps = append(lps, part.logprobs...)
		if part.done {
			if part.err != nil {
				return internal(part.err)
			}
			resp := f.newResponse(id, s.cfg.Model.Name())
			writeJSON(w, http.StatusOK, resp.whole(text.String(), part.reason, part.usage,
				logprobsJSON(f, s.cfg.Model.Piece, lps, p.logprobs)))
			return nil
		}
	}
}

// sampling merges a request's fields into the server's defaults.
func (s *Server) sampling(p params) sample.Params {
	sp := s.cfg.Defaults
	set := func(dst *float32, v *float64) {
		if v != nil {
			*dst = float32(*v)
		}
	}
	set(&sp.Temp, p.temp)
	set(&sp.TopP, p.topP)
	set(&sp.MinP, p.minP)
	set(&sp.PresPenalty, p.presence)
	set(&sp.FreqPenalty, p.frequency)
	set(&sp.RepeatPenalty, p.repeat)
	if p.topK != nil {
		sp.TopK = *p.topK
	}
	switch {
	case p.seed != nil && *p.seed >= 0:
		sp.Seed = uint64(*p.seed)
	case s.cfg.Seed >= 0:
		sp.Seed = uint64(s.cfg.Seed)
	default:
		sp.Seed = s.random()
	}
	return sp
}

func (s *Server) random() uint64 {
	s.rngMu.Lock()
	defer s.rngMu.Unlock()
	return s.rng.Uint64()
}
