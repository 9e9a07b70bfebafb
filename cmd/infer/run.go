package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
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
		sf           sampleFlags
		parseSpecial = fs.Bool("special", false, "parse special-token text (e.g. <|eot_id|>) in the prompt")
		jsonOut      = fs.Bool("json", false, "print one JSON object on stdout at the end (prompt and generated token ids, text, timings) instead of streaming the text")
	)
	lo.register(fs)
	sf.register(fs)
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
	sp := sf.params()

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
	// With --json, stdout holds exactly one JSON document: the text is
	// gathered for it instead of streamed.
	var out io.Writer = os.Stdout
	var gathered strings.Builder
	if *jsonOut {
		out = &gathered
	} else if !*noDisplay {
		io.WriteString(out, text)
	}
	dec := m.Tok.NewDecoder()
	generated := []int32{}
	st, err := m.Generate(ctx, tokens, model.GenOptions{N: *nPredict, IgnoreEOS: *ignoreEOS}, sample.New(sp), func(id int32) error {
		generated = append(generated, id)
		_, err := io.WriteString(out, dec.Add(id))
		return err
	})
	io.WriteString(out, dec.Flush())
	if !*jsonOut {
		io.WriteString(out, "\n")
	}
	printTimings(os.Stderr, loadTime, st)
	interrupted := errors.Is(err, context.Canceled)
	if interrupted {
		fmt.Fprintln(os.Stderr, "interrupted")
	} else if err != nil {
		return err
	}
	if !*jsonOut {
		return nil
	}
	r := runReport{Model: lo.model, Prompt: text, PromptTokens: tokens, Tokens: generated, Text: gathered.String(),
		Stop: stopReason(interrupted, st, len(generated)), Seed: sp.Seed, Timings: newRunTimings(loadTime, st)}
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("--json: %w", err)
	}
	_, err = os.Stdout.Write(append(b, '\n'))
	return err
}

// sampleFlags are the sampling flags shared by run and chat, under
// llama.cpp's names and defaults.
type sampleFlags struct {
	p    sample.Params
	seed int64
}

func (f *sampleFlags) register(fs *pflag.FlagSet) {
	f.p = sample.Defaults()
	fs.Float32Var(&f.p.Temp, "temp", f.p.Temp, "temperature (0: greedy)")
	fs.IntVar(&f.p.TopK, "top-k", f.p.TopK, "top-k sampling (0: off)")
	fs.Float32Var(&f.p.TopP, "top-p", f.p.TopP, "top-p sampling (1: off)")
	fs.Float32Var(&f.p.MinP, "min-p", f.p.MinP, "min-p sampling (0: off)")
	fs.Float32Var(&f.p.RepeatPenalty, "repeat-penalty", f.p.RepeatPenalty, "penalise repeated tokens (1: off)")
	fs.Float32Var(&f.p.FreqPenalty, "frequency-penalty", f.p.FreqPenalty, "subtract this per earlier occurrence of a token (0: off)")
	fs.Float32Var(&f.p.PresPenalty, "presence-penalty", f.p.PresPenalty, "subtract this from tokens that occurred (0: off)")
	fs.IntVar(&f.p.RepeatLastN, "repeat-last-n", f.p.RepeatLastN, "tokens of history the penalties consider")
	fs.Int64Var(&f.seed, "seed", -1, "random seed (-1: random)")
}

// params are the sampler's parameters, with a seed drawn from the clock
// for --seed -1.
func (f *sampleFlags) params() sample.Params {
	p := f.p
	if p.Seed = uint64(f.seed); f.seed < 0 {
		p.Seed = uint64(time.Now().UnixNano())
	}
	return p
}

// runReport is what --json prints: one object for scripts, and for tests
// that compare token ids with llama.cpp's.
type runReport struct {
	Model        string     `json:"model"`         // the -m argument
	Prompt       string     `json:"prompt"`        // the prompt text
	PromptTokens []int32    `json:"prompt_tokens"` // the prompt as evaluated (BOS included where the model adds one)
	Tokens       []int32    `json:"tokens"`        // the generated tokens, as emitted
	Text         string     `json:"text"`          // the generated text (without the prompt)
	Stop         string     `json:"stop"`          // see stopReason
	Seed         uint64     `json:"seed"`          // the sampler's seed, drawn at random for --seed -1
	Timings      runTimings `json:"timings"`
}

// runTimings are the end-of-run figures under llama-server's names
// (prompt_n, prompt_ms, prompt_per_token_ms, prompt_per_second, and the
// same for predicted), with the load time beside them.
type runTimings struct {
	LoadMS              float64 `json:"load_ms"`
	PromptN             int     `json:"prompt_n"`
	PromptMS            float64 `json:"prompt_ms"`
	PromptPerTokenMS    float64 `json:"prompt_per_token_ms"`
	PromptPerSecond     float64 `json:"prompt_per_second"`
	PredictedN          int     `json:"predicted_n"`
	PredictedMS         float64 `json:"predicted_ms"`
	PredictedPerTokenMS float64 `json:"predicted_per_token_ms"`
	PredictedPerSecond  float64 `json:"predicted_per_second"`
}

func newRunTimings(load time.Duration, st model.Stats) runTimings {
	t := runTimings{LoadMS: millis(load), PromptN: st.PromptTokens, PredictedN: st.GenTokens}
	t.PromptMS, t.PromptPerTokenMS, t.PromptPerSecond = rate(st.PromptTime, st.PromptTokens)
	t.PredictedMS, t.PredictedPerTokenMS, t.PredictedPerSecond = rate(st.GenTime, st.GenTokens)
	return t
}

// stopReason says why generation ended: "interrupted" (Ctrl-C), "eog" (an
// end-of-generation token was sampled: Generate counts it in GenTokens but
// does not emit it) or "limit" (-n tokens, or the context is full).
func stopReason(interrupted bool, st model.Stats, emitted int) string {
	switch {
	case interrupted:
		return "interrupted"
	case st.GenTokens > emitted:
		return "eog"
	}
	return "limit"
}

func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// rate gives n tokens in d as milliseconds, milliseconds per token and
// tokens per second (0 where nothing ran).
func rate(d time.Duration, n int) (ms, perToken, perSecond float64) {
	ms = millis(d)
	if n > 0 && ms > 0 {
		perToken, perSecond = ms/float64(n), 1000*float64(n)/ms
	}
	return ms, perToken, perSecond
}

// printTimings prints llama.cpp's familiar end-of-run lines.
func printTimings(w io.Writer, load time.Duration, st model.Stats) {
	fmt.Fprintf(w, "\n%20s = %10.2f ms\n", "load time", millis(load))
	printEvalTimings(w, st)
	fmt.Fprintf(w, "%20s = %10.2f ms / %5d tokens\n", "total time", millis(load+st.PromptTime+st.GenTime), st.PromptTokens+st.GenTokens)
}

// printEvalTimings prints the prompt and generation lines of llama.cpp's
// timings.
func printEvalTimings(w io.Writer, st model.Stats) {
	line := func(name string, d time.Duration, n int, unit string) {
		ms, per, tps := rate(d, n)
		fmt.Fprintf(w, "%20s = %10.2f ms / %5d %-6s (%8.2f ms per token, %8.2f tokens per second)\n", name, ms, n, unit, per, tps)
	}
	line("prompt eval time", st.PromptTime, st.PromptTokens, "tokens")
	line("eval time", st.GenTime, st.GenTokens, "runs")
}
