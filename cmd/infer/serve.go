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
		parallel     = fs.Int("parallel", 4, "slots: requests generating at once")
		queue        = fs.Int("queue", 64, "requests waiting for a slot before the server answers 503")
		apiKey       = fs.String("api-key", "", "require this key (Authorization: Bearer KEY) on every endpoint but /health")
		templateFile = fs.String("chat-template-file", "", "Jinja chat template to use instead of the model's")
		alias        = fs.String("alias", "", "the model's id in /v1/models (default: the file name)")
		drain        = fs.Duration("drain", 10*time.Second, "on SIGINT/SIGTERM, how long requests in flight may finish before they are cancelled")
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
	m, closeModel, _, err := lo.load()
	if err != nil {
		return err
	}
	defer closeModel()
	tmpl, fallback, err := chat.FromModel(lo.file, *templateFile)
	if err != nil {
		return err
	}
	if fallback {
		fmt.Fprintln(os.Stderr, "serve: the model has no chat template (tokenizer.chat_template); using ChatML, as llama.cpp does")
	}
	name := *alias
	if name == "" {
		name = strings.TrimSuffix(filepath.Base(lo.file.Path()), ".gguf")
	}
	sm := &servedModel{m: m, tmpl: tmpl, name: name}
	sm.bos, sm.eos = chat.SpecialTexts(m.Tok)
	srv, err := server.New(server.Config{Model: sm, Engine: sessionEngine{m.NewSession()}, Parallel: *parallel,
		Queue: *queue, APIKey: *apiKey, Defaults: sf.p, Seed: sf.seed, Log: os.Stderr})
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 30 * time.Second}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	fmt.Fprintf(os.Stderr, "serve: %s on http://%s (%d slots over one KV cache: concurrent requests are interleaved, not batched)\n",
		name, ln.Addr(), *parallel)

	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)
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
	m        *model.Model
	tmpl     *chat.Template
	bos, eos string
	name     string
}

func (s *servedModel) Name() string                 { return s.name }
func (s *servedModel) Context() int                 { return s.m.Context }
func (s *servedModel) VocabSize() int               { return s.m.HP.Vocab }
func (s *servedModel) Tokenize(text string) []int32 { return chat.Tokenize(s.m.Tok, text) }
func (s *servedModel) NewDecoder() server.Decoder   { return s.m.Tok.NewDecoder() }
func (s *servedModel) IsEOG(id int32) bool          { return s.m.Tok.IsEOG(id) }

func (s *servedModel) ApplyTemplate(msgs []server.Message) (string, error) {
	conv := make([]chat.Message, len(msgs))
	for i, m := range msgs {
		conv[i] = chat.Message(m)
	}
	return s.tmpl.Render(conv, true, s.bos, s.eos)
}

// sessionEngine runs the scheduler's sequences on the model's one KV cache
// through a Session: one sequence at a time, each evaluation reusing the
// prefix the cache holds.
type sessionEngine struct{ s *model.Session }

func (e sessionEngine) Seqs() int { return 1 }

func (e sessionEngine) Eval(batch []server.Seq) error {
	for i := range batch {
		q := &batch[i]
		logits, reused, err := e.s.Eval(q.Tokens)
		if err != nil {
			return err
		}
		q.Logits, q.Reused = logits, reused
	}
	return nil
}
