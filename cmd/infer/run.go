package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/spf13/pflag"
	"github.com/vkinfer/vkinfer/model"
	"github.com/vkinfer/vkinfer/model/sample"
)

// runCmd generates text: `infer -m model.gguf -p "…"`.
func runCmd(args []string) error {
	fs := pflag.NewFlagSet("infer", pflag.ContinueOnError)
	var (
		lo           loadFlags
		prompt       = fs.StringP("prompt", "p", "", "prompt text")
		promptFile   = fs.StringP("file", "f", "", "read the prompt from a file")
		nPredict     = fs.IntP("n-predict", "n", -1, "tokens to generate (-1: until end of text or a full context)")
		noDisplay    = fs.Bool("no-display-prompt", false, "don't echo the prompt before the generated text")
		ignoreEOS    = fs.Bool("ignore-eos", false, "keep generating past end-of-text tokens")
		sp           = sample.Defaults()
		seed         = fs.Int64("seed", -1, "random seed (-1: random)")
		parseSpecial = fs.Bool("special", false, "parse special-token text (e.g. <|eot_id|>) in the prompt")
	)
	lo.register(fs)
	fs.Float32Var(&sp.Temp, "temp", sp.Temp, "temperature (0: greedy)")
	fs.IntVar(&sp.TopK, "top-k", sp.TopK, "top-k sampling (0: off)")
	fs.Float32Var(&sp.TopP, "top-p", sp.TopP, "top-p sampling (1: off)")
	fs.Float32Var(&sp.MinP, "min-p", sp.MinP, "min-p sampling (0: off)")
	fs.Float32Var(&sp.RepeatPenalty, "repeat-penalty", sp.RepeatPenalty, "penalise repeated tokens (1: off)")
	fs.IntVar(&sp.RepeatLastN, "repeat-last-n", sp.RepeatLastN, "tokens of history the repeat penalty considers")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (see infer --help)", fs.Arg(0))
	}
	text := *prompt
	if *promptFile != "" {
		b, err := os.ReadFile(*promptFile)
		if err != nil {
			return fmt.Errorf("reading the prompt: %w", err)
		}
		text = string(b)
	}
	if sp.Seed = uint64(*seed); *seed < 0 {
		sp.Seed = uint64(time.Now().UnixNano())
	}

	m, closeModel, loadTime, err := lo.load()
	if err != nil {
		return err
	}
	defer closeModel()

	tokens := m.Tok.Encode(text, true, *parseSpecial)
	if len(tokens) == 0 {
		return fmt.Errorf("the prompt is empty and the model adds no BOS token: nothing to evaluate")
	}
	if *nPredict >= 0 && len(tokens)+*nPredict > m.Context || len(tokens) >= m.Context {
		return fmt.Errorf("the prompt (%d tokens) plus %d tokens to generate exceed the context of %d; raise -c or lower -n", len(tokens), max(*nPredict, 1), m.Context)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	out := os.Stdout
	if !*noDisplay {
		io.WriteString(out, text)
	}
	dec := m.Tok.NewDecoder()
	st, err := m.Generate(ctx, tokens, model.GenOptions{N: *nPredict, IgnoreEOS: *ignoreEOS}, sample.New(sp), func(id int32) error {
		_, err := io.WriteString(out, dec.Add(id))
		return err
	})
	io.WriteString(out, dec.Flush()+"\n")
	printTimings(os.Stderr, loadTime, st)
	if errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "interrupted")
		return nil
	}
	return err
}

// printTimings prints llama.cpp's familiar end-of-run lines.
func printTimings(w io.Writer, load time.Duration, st model.Stats) {
	line := func(name string, d time.Duration, n int, unit string) {
		ms := float64(d.Microseconds()) / 1000
		per, tps := 0.0, 0.0
		if n > 0 && ms > 0 {
			per, tps = ms/float64(n), 1000*float64(n)/ms
		}
		fmt.Fprintf(w, "%20s = %10.2f ms / %5d %-6s (%8.2f ms per token, %8.2f tokens per second)\n", name, ms, n, unit, per, tps)
	}
	fmt.Fprintf(w, "\n%20s = %10.2f ms\n", "load time", float64(load.Microseconds())/1000)
	line("prompt eval time", st.PromptTime, st.PromptTokens, "tokens")
	line("eval time", st.GenTime, st.GenTokens, "runs")
	fmt.Fprintf(w, "%20s = %10.2f ms / %5d tokens\n", "total time",
		float64((load+st.PromptTime+st.GenTime).Microseconds())/1000, st.PromptTokens+st.GenTokens)
}
