package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"

	"github.com/spf13/pflag"
	"github.com/vkinfer/vkinfer/chat"
	"github.com/vkinfer/vkinfer/model"
	"github.com/vkinfer/vkinfer/model/sample"
)

// chatCmd is an interactive conversation: `infer chat -m model.gguf`.
func chatCmd(args []string) error {
	fs := pflag.NewFlagSet("infer chat", pflag.ContinueOnError)
	var (
		lo           loadFlags
		sf           sampleFlags
		system       = fs.String("system", "", "system message that opens the conversation")
		templateFile = fs.String("chat-template-file", "", "Jinja chat template to use instead of the model's")
		nPredict     = fs.IntP("n-predict", "n", -1, "most tokens per answer (-1: until end of generation or a full context)")
		ignoreEOS    = fs.Bool("ignore-eos", false, "keep answering past end-of-generation tokens")
	)
	lo.register(fs)
	sf.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (see infer chat --help)", fs.Arg(0))
	}
	m, closeModel, _, err := lo.load()
	if err != nil {
		return err
	}
	defer closeModel()
	tmpl, err := loadTemplate("chat", os.Stderr, lo.file, m, *templateFile)
	if err != nil {
		return err
	}
	c := &conversation{m: m, tmpl: tmpl, session: m.NewSession(), smp: sample.New(sf.params()),
		opts: model.GenOptions{N: *nPredict, IgnoreEOS: *ignoreEOS}, verbose: lo.verbose,
		out: os.Stdout, log: os.Stderr}
	if *system != "" {
		c.system = []chat.Message{{Role: "system", Content: *system}}
	}
	c.clear()
	return c.run(os.Stdin)
}

// conversation is the state of infer chat: the messages so far and the
// session whose cache holds their tokens.
type conversation struct {
	m        *model.Model
	tmpl     promptTemplate
	session  *model.Session
	smp      *sample.Sampler
	opts     model.GenOptions
	verbose  bool
	out, log io.Writer
	system   []chat.Message // the --system message, kept by /clear
	msgs     []chat.Message
	// heldText is the conversation as text up to the end of the last
	// answer, and heldToks its tokens as the model saw them: the rendered
	// prompt's, then the answer's as sampled.
	heldText string
	heldToks []int32
}

const chatHelp = "chat: type a message; /clear starts a new conversation, /exit (or end of input) quits, Ctrl-C stops an answer"

// run reads messages from in until /exit or the end of input. Ctrl-C stops
// the answer being written; at the prompt it quits.
func (c *conversation) run(in io.Reader) error {
	lines := make(chan string)
	readErr := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(in)
		sc.Buffer(make([]byte, 64*1024), 16<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		readErr <- sc.Err()
		close(lines)
	}()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt)
	defer signal.Stop(sig)

	fmt.Fprintln(c.log, chatHelp)
	for {
		fmt.Fprint(c.out, "> ")
		var line string
		select {
		case l, ok := <-lines:
			if !ok {
				fmt.Fprintln(c.out)
				if err := <-readErr; err != nil {
					return fmt.Errorf("reading the input: %w", err)
				}
				return nil
			}
			line = l
		case <-sig:
			fmt.Fprintln(c.out)
			return nil
		}
		switch text := strings.TrimSpace(line); text {
		case "":
		case "/exit":
			return nil
		case "/clear":
			c.clear()
			fmt.Fprintln(c.log, "chat: new conversation")
		default:
			if err := c.turn(text, sig); err != nil {
				return err
			}
		}
	}
}

// clear starts the conversation again, with the system message if any.
func (c *conversation) clear() {
	c.msgs = append(c.msgs[:0], c.system...)
	c.heldText, c.heldToks = "", nil
	c.session.Reset()
}

// tokenize returns the tokens of a rendered prompt. Where the prompt
// extends the text held (the template rendered the earlier turns as
// before), only the extension is tokenized and the held tokens are kept:
// the answer's text might tokenize otherwise than it was sampled, and the
// session would then prefill it again (llama.cpp's llama-cli tokenizes
// only the new part too). An extension whose first token does not begin
// with its text (SentencePiece's space prefix at the start of a text) is
// no extension: the whole prompt is tokenized.
func (c *conversation) tokenize(prompt string) []int32 {
	if ext, ok := strings.CutPrefix(prompt, c.heldText); ok && c.heldText != "" {
		toks := c.m.Tok.Encode(ext, false, true)
		if len(toks) > 0 && strings.HasPrefix(ext, c.m.Tok.Piece(toks[0])) {
			return append(slices.Clip(c.heldToks), toks...)
		}
	}
	return chat.Tokenize(c.m.Tok, prompt)
}

// turn answers one user message, streaming the answer. A message the
// template refuses or that would overflow the context is dropped with a
// message and the conversation goes on as it was; errors of the model end
// the program.
func (c *conversation) turn(text string, sig <-chan os.Signal) error {
	msgs := append(c.msgs, chat.Message{Role: "user", Content: text})
	prompt, err := c.tmpl.render(msgs)
	if err != nil {
		fmt.Fprintf(c.log, "chat: %v\n", err)
		return nil
	}
	toks := c.tokenize(prompt)
	if len(toks) >= c.m.Context {
		fmt.Fprintf(c.log, "chat: the conversation with this message is %d tokens, and the context holds %d: /clear starts a new one (or run with a larger -c)\n",
			len(toks), c.m.Context)
		return nil
	}
	o, room := c.opts, c.m.Context-len(toks)
	if o.N < 0 || o.N > room {
		o.N = room
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		select {
		case <-sig:
			cancel()
		case <-done:
		}
	}()
	dec := c.m.Tok.NewDecoder()
	var answer strings.Builder
	held := slices.Clip(toks)
	st, err := c.session.Generate(ctx, toks, o, c.smp, func(id int32) error {
		held = append(held, id)
		s := dec.Add(id)
		answer.WriteString(s)
		_, err := io.WriteString(c.out, s)
		return err
	})
	close(done)
	cancel()
	s := dec.Flush()
	answer.WriteString(s)
	io.WriteString(c.out, s+"\n")
	interrupted := errors.Is(err, context.Canceled)
	if err != nil && !interrupted {
		return err
	}
	// The answer joins the conversation even when cut short: the next
	// turn renders it, and the session reuses the tokens it holds.
	c.msgs = append(msgs, chat.Message{Role: "assistant", Content: answer.String()})
	c.heldText, c.heldToks = prompt+answer.String(), held
	emitted := len(held) - len(toks)
	if c.verbose {
		fmt.Fprintf(c.log, "chat: prompt %d tokens, %d reused from the cache, %d prefilled\n", len(toks), st.Reused, st.PromptTokens)
	}
	printEvalTimings(c.log, st)
	switch {
	case interrupted:
		fmt.Fprintln(c.log, "chat: answer interrupted")
	case o.N == room && emitted == room:
		fmt.Fprintf(c.log, "chat: the answer filled the context of %d tokens: /clear starts a new conversation\n", c.m.Context)
	}
	return nil
}
