package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"github.com/vkinfer/vkinfer/chat"
	"github.com/vkinfer/vkinfer/model"
	"github.com/vkinfer/vkinfer/server"
)

// serveCmd runs the OpenAI-compatible server: `infer serve -m model.gguf`.
func serveCmd(args []string) error {
	fs := pflag.NewFlagSet("infer serve", pflag.ContinueOnError)
	var (
		lo           loadFlags
		sf           sampleFlags
		host         = fs.String("host", "127.0.0.1", "address to listen on")
		port         = fs.Int("port", 8080, "port to listen on (0: any free port)")
		parallel     = fs.Int("parallel", 4, "slots: requests generating at once, decoded together where the backend can (each holds a sequence of -c positions in the KV cache)")
		queue        = fs.Int("queue", 64, "requests waiting for a slot before the server answers 503")
		apiKey       = fs.String("api-key", "", "require this key (Authorization: Bearer KEY) on every endpoint but /health")
		templateFile = fs.String("chat-template-file", "", "Jinja chat template to use instead of the model's")
		alias        = fs.String("alias", "", "the model's id in /v1/models (default: the file name)")
		drain        = fs.Duration("drain", 10*time.Second, "on SIGINT/SIGTERM, how long requests in flight may finish before they are cancelled")
		noWarmup     = fs.Bool("no-warmup", false, "do not record the decode programs of 1 to --parallel sequences before serving (each is then recorded by the first step that needs it)")
	)
	lo.register(fs)
	sf.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (see infer serve --help)", fs.Arg(0))
	}
	if *parallel < 1 {
		return fmt.Errorf("--parallel %d: want at least 1", *parallel)
	}
	if *queue < 0 {
		return fmt.Errorf("--queue %d: want 0 or more", *queue)
	}
	// Listen before loading: a taken port fails at once.
	ln, err := net.Listen("tcp", net.JoinHostPort(*host, strconv.Itoa(*port)))
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	defer ln.Close()
	lo.seqs = *parallel
	m, closeModel, _, err := lo.load()
	if err != nil {
		return err
	}
	defer closeModel()
	tmpl, err := loadTemplate("serve", os.Stderr, lo.file, m, *templateFile)
	if err != nil {
		return err
	}
	name := *alias
	if name == "" {
		name = strings.TrimSuffix(filepath.Base(lo.file.Path()), ".gguf")
	}
	sm := &servedModel{m: m, tmpl: tmpl, name: name}
	eng, err := newSeqEngine(m)
	if err != nil {
		return err
	}
	if !*noWarmup {
		if err := prepareSteps(m, *parallel, "serve"); err != nil {
			return err
		}
	}
	srv, err := server.New(server.Config{Model: sm, Engine: eng, Parallel: *parallel,
		Queue: *queue, APIKey: *apiKey, Defaults: sf.p, Seed: sf.seed, Log: os.Stderr})
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 30 * time.Second}
	// Signals are caught before the first request can be served: a
	// SIGTERM that came between would otherwise kill the process with
	// its streams cut.
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	how := fmt.Sprintf("%d slots, decoded together in one forward pass", *parallel)
	if m.Seqs < *parallel {
		how = fmt.Sprintf("%d slots over %d KV cache sequences: the %s backend decodes one sequence at a time, so concurrent requests are interleaved",
			*parallel, m.Seqs, lo.backendName)
	}
	fmt.Fprintf(os.Stderr, "serve: %s on http://%s (%s)\n", name, ln.Addr(), how)
	defer func() {
		fmt.Fprintf(os.Stderr, "serve: decoded %d tokens in %d forward passes\n", eng.decoded.Load(), eng.passes.Load())
	}()

	select {
	case err := <-served:
		srv.Cancel()
		srv.Close()
		return fmt.Errorf("serve: %w", err)
	case s := <-sig:
		fmt.Fprintf(os.Stderr, "serve: %v: finishing the requests in flight (another signal, or %v, cancels them)\n", s, *drain)
	}
	return shutdown(hs, srv, sig, *drain)
}

// prepareSteps records the decode programs of 1 to n sequences (as many
// as the model's cache holds) before the first request. A step of a count
// of sequences not seen before records its program inside the request
// that made it, and where the driver's pipeline cache is cold it compiles
// that count's pipelines there too: seconds during which every stream
// waits (docs/SERVER.md).
func prepareSteps(m *model.Model, n int, who string) error {
	t0 := time.Now()
	if err := m.Prepare(1, false); err != nil {
		return fmt.Errorf("%s: %w", who, err)
	}
	n = min(n, m.Seqs)
	for k := 2; k <= n; k++ {
		fmt.Fprintf(os.Stderr, "\r%s: recording the decode programs: %d/%d sequences", who, k, n)
		if err := m.PrepareRows(k); err != nil {
			fmt.Fprintln(os.Stderr)
			return fmt.Errorf("%s: %w", who, err)
		}
	}
	if n > 1 {
		fmt.Fprintln(os.Stderr)
	}
	fmt.Fprintf(os.Stderr, "%s: decode programs of 1 to %d sequences recorded in %.2f s\n", who, max(n, 1), time.Since(t0).Seconds())
	return nil
}

// shutdown stops accepting connections and requests, lets those in flight
// finish for up to drain (or until another signal), cancels the rest, and
// returns once every handler and the scheduler are done.
func shutdown(hs *http.Server, srv *server.Server, sig <-chan os.Signal, drain time.Duration) error {
	done := make(chan error, 1)
	go func() {
		// The listener closes at once; requests on connections already
		// open get 503 while those in flight finish.
		closed := make(chan struct{})
		go func() {
			srv.Close()
			close(closed)
		}()
		err := hs.Shutdown(context.Background())
		<-closed
		done <- err
	}()
	timer := time.NewTimer(drain)
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-sig:
	case <-timer.C:
	}
	fmt.Fprintln(os.Stderr, "serve: cancelling the requests in flight")
	srv.Cancel()
	if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: shutting down: %w", err)
	}
	return nil
}

// servedModel is the model as the server sees it: its tokenizer and chat
// template.
type servedModel struct {
	m    *model.Model
	tmpl promptTemplate
	name string
}

func (s *servedModel) Name() string                 { return s.name }
func (s *servedModel) Context() int                 { return s.m.Context }
func (s *servedModel) VocabSize() int               { return s.m.HP.Vocab }
func (s *servedModel) Tokenize(text string) []int32 { return chat.Tokenize(s.m.Tok, text) }
func (s *servedModel) NewDecoder() server.Decoder   { return s.m.Tok.NewDecoder() }
func (s *servedModel) IsEOG(id int32) bool          { return s.m.Tok.IsEOG(id) }
func (s *servedModel) Piece(id int32) string        { return s.m.Tok.Piece(id) }

func (s *servedModel) ApplyTemplate(msgs []server.Message) (string, error) {
	conv := make([]chat.Message, len(msgs))
	for i, m := range msgs {
		conv[i] = chat.Message(m)
	}
	return s.tmpl.render(conv)
}

// seqEngine runs the scheduler's sequences on sessions of the model, one
// per sequence its KV cache holds. Each Eval brings every sequence to its
// tokens in as few forward passes as it can (Model.EvalBatch): the
// sequences that need only their newest token decode together, and new
// prompts (or, on a cache of one sequence, the request that takes it
// over, past their common prefix) prefill beside them.
type seqEngine struct {
	m        *model.Model
	sessions []*model.Session
	// passes counts the decoding forward passes (those of sequences that
	// each needed one token), decoded the tokens they decoded
	// (decoded/passes sequences a pass on average) and decodeNanos the
	// time they took (the rate llama-batched-bench calls S_TG, without
	// prompts or sampling). Atomic: infer loadgen reads them while the
	// scheduler runs.
	passes, decoded, decodeNanos atomic.Int64
	// prefills counts the other Evals: those that evaluated a prompt.
	prefills atomic.Int64
	// batch and toks are the batch of one Eval, kept between calls.
	batch []*model.Session
	toks  [][]int32
}

func newSeqEngine(m *model.Model) (*seqEngine, error) {
	ss, err := m.NewSessions(m.Seqs)
	if err != nil {
		return nil, err
	}
	return &seqEngine{m: m, sessions: ss}, nil
}

func (e *seqEngine) Seqs() int { return len(e.sessions) }

func (e *seqEngine) Eval(batch []server.Seq) error {
	if len(batch) == 0 {
		return nil
	}
	e.batch, e.toks = e.batch[:0], e.toks[:0]
	decoding := true
	for i := range batch {
		s := e.sessions[batch[i].Cache]
		if _, ok := s.Next(batch[i].Tokens); !ok {
			decoding = false
		}
		e.batch, e.toks = append(e.batch, s), append(e.toks, batch[i].Tokens)
	}
	t0 := time.Now()
	logits, reused, err := e.m.EvalBatch(e.batch, e.toks)
	if err != nil {
		return err
	}
	if decoding {
		e.decodeNanos.Add(int64(time.Since(t0)))
		e.passes.Add(1)
		e.decoded.Add(int64(len(batch)))
	} else {
		e.prefills.Add(1)
	}
	// The logits stay put until the next EvalBatch, that is the next Eval.
	vocab := e.m.HP.Vocab
	for i := range batch {
		batch[i].Logits, batch[i].Reused = logits[i*vocab:(i+1)*vocab], reused[i]
	}
	return nil
}
