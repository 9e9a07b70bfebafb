package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"
	"github.com/vkinfer/vkinfer/model/sample"
	"github.com/vkinfer/vkinfer/server"
)

// loadgenCmd measures the server's total generation rate under
// concurrent streams: `infer loadgen -m MODEL --concurrent 1,4,16,64`.
// The server runs in-process on a loopback port with a slot (and a KV
// cache sequence) per stream of the largest level; each level sends that
// many completions at once and times them until the last one ends.
func loadgenCmd(args []string) error {
	fs := pflag.NewFlagSet("infer loadgen", pflag.ContinueOnError)
	var (
		lo         loadFlags
		levels     = fs.String("concurrent", "1,4,16,64", "comma-separated numbers of concurrent streams, one measurement each")
		gen        = fs.IntP("n-predict", "n", 128, "tokens each stream generates (end of generation ignored)")
		promptLen  = fs.Int("prompt-tokens", 32, "tokens in each stream's prompt (distinct per stream)")
		reps       = fs.Int("reps", 1, "measurements per level (the table shows their mean)")
		warmTokens = 4
	)
	lo.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (see infer loadgen --help)", fs.Arg(0))
	}
	conc, err := parseLevels(*levels)
	if err != nil {
		return err
	}
	if *gen < 1 || *promptLen < 1 || *reps < 1 {
		return fmt.Errorf("-n %d, --prompt-tokens %d, --reps %d: want at least 1 each", *gen, *promptLen, *reps)
	}
	most := 0
	for _, c := range conc {
		most = max(most, c)
	}
	if lo.ctx == 0 {
		// One sequence per stream: the context each needs, not the model's.
		lo.ctx = *promptLen + *gen
	}
	lo.seqs = most
	m, closeModel, _, err := lo.load()
	if err != nil {
		return err
	}
	defer closeModel()
	if *promptLen+*gen > m.Context {
		return fmt.Errorf("a prompt of %d tokens and %d to generate exceed the context of %d (-c)", *promptLen, *gen, m.Context)
	}
	eng, err := newSeqEngine(m)
	if err != nil {
		return err
	}
	// Every step size the streams can make, before anything is timed: the
	// warm-up round below makes only the sizes its own arrivals make.
	if err := prepareSteps(m, most, "loadgen"); err != nil {
		return err
	}
	srv, err := server.New(server.Config{Model: &servedModel{m: m, name: "loadgen"}, Engine: eng, Parallel: most,
		Queue: most, Defaults: sample.Params{Temp: 0}, Seed: 1})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("loadgen: %w", err)
	}
	hs := &http.Server{Handler: srv}
	go hs.Serve(ln)
	defer func() {
		hs.Close()
		srv.Close()
	}()
	url := "http://" + ln.Addr().String() + "/v1/completions"
	if m.Seqs < most {
		fmt.Fprintf(os.Stderr, "loadgen: the %s backend decodes one sequence at a time: the streams are interleaved, not batched\n", lo.backendName)
	}

	vocab := min(m.HP.Vocab, 1000)
	prompt := func(stream, rep int) []int32 {
		ids := make([]int32, *promptLen)
		for i := range ids {
			ids[i] = int32(3 + (i*37+stream*101+rep*7919)%(vocab-3))
		}
		return ids
	}
	// round sends c completions of n tokens at once and waits for them.
	round := func(c, n, rep int) (tokens int, took time.Duration, err error) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		t0 := time.Now()
		for i := range c {
			wg.Go(func() {
				got, rerr := complete(url, prompt(i, rep), n)
				mu.Lock()
				defer mu.Unlock()
				tokens += got
				if rerr != nil && err == nil {
					err = rerr
				}
			})
		}
		wg.Wait()
		return tokens, time.Since(t0), err
	}

	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "model\tbackend\tstreams\tprompt\tgen\ttokens\ttime s\ttotal t/s\tper stream t/s\tseqs/pass\tdecode t/s\t\n")
	for _, c := range conc {
		// Warm-up: the prompts' programs and the first passes.
		if _, _, err := round(c, warmTokens, *reps); err != nil {
			return err
		}
		var tokens int
		var took time.Duration
		passes, decoded, nanos := eng.passes.Load(), eng.decoded.Load(), eng.decodeNanos.Load()
		for rep := range *reps {
			n, d, err := round(c, *gen, rep)
			if err != nil {
				return err
			}
			tokens, took = tokens+n, took+d
		}
		passes, decoded, nanos = eng.passes.Load()-passes, eng.decoded.Load()-decoded, eng.decodeNanos.Load()-nanos
		rate := float64(tokens) / took.Seconds()
		perPass, decodeRate := 0.0, 0.0
		if passes > 0 {
			perPass = float64(decoded) / float64(passes)
		}
		if nanos > 0 {
			decodeRate = float64(decoded) / (float64(nanos) / 1e9)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t\n", m.HP.Arch, lo.backendName, c, *promptLen, *gen,
			tokens, took.Seconds(), rate, rate/float64(c), perPass, decodeRate)
	}
	return tw.Flush()
}

// parseLevels reads --concurrent: positive counts separated by commas.
func parseLevels(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("--concurrent %q: want positive counts separated by commas", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// complete sends one completion of n tokens (greedy, end of generation
// ignored) and returns the tokens it generated.
func complete(url string, prompt []int32, n int) (int, error) {
	body, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": n, "temperature": 0, "ignore_eos": true})
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("loadgen: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("loadgen: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("loadgen: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("loadgen: the server answered %d: %s", resp.StatusCode, bytes.TrimSpace(b))
	}
	var r struct {
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return 0, fmt.Errorf("loadgen: the server's answer: %w", err)
	}
	return r.Usage.CompletionTokens, nil
}
