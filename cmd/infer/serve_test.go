package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/vkinfer/vkinfer/internal/fixtures"
)

// served is a running `infer serve`.
type served struct {
	url    string
	lines  chan string // stderr after the listening line, one line each
	cmd    *cmdWait
	client openai.Client
}

type cmdWait struct {
	wait   func() error
	signal func(os.Signal) error
	stderr strings.Builder
	mu     sync.Mutex
}

var listening = regexp.MustCompile(`serve: .* on (http://[^ ]+) `)

// startServe runs `infer serve` on a free port with args and waits until it
// listens; the test's end stops it with SIGTERM and checks it exits 0.
func startServe(t *testing.T, key string, args ...string) *served {
	t.Helper()
	cmd := command(t, append([]string{"serve", "--port", "0"}, args...)...)
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &served{lines: make(chan string, 1000), cmd: &cmdWait{wait: cmd.Wait, signal: cmd.Process.Signal}}
	sc := bufio.NewScanner(pipe)
	for sc.Scan() {
		s.cmd.stderr.WriteString(sc.Text() + "\n")
		if m := listening.FindStringSubmatch(sc.Text()); m != nil {
			s.url = m[1]
			break
		}
	}
	if s.url == "" {
		cmd.Wait()
		t.Fatalf("infer serve did not start:\n%s", s.cmd.stderr.String())
	}
	go func() {
		for sc.Scan() {
			s.cmd.mu.Lock()
			s.cmd.stderr.WriteString(sc.Text() + "\n")
			s.cmd.mu.Unlock()
			select {
			case s.lines <- sc.Text():
			default:
			}
		}
		close(s.lines)
	}()
	s.client = openai.NewClient(option.WithBaseURL(s.url+"/v1"), option.WithAPIKey(key), option.WithMaxRetries(0))
	t.Cleanup(func() { s.stop(t) })
	return s
}

// stop sends SIGTERM and checks that the server exits 0 (once).
func (s *served) stop(t *testing.T) {
	if s.cmd.signal == nil {
		return
	}
	s.cmd.signal(syscall.SIGTERM)
	s.cmd.signal = nil
	for range s.lines {
	}
	if err := s.cmd.wait(); err != nil {
		t.Errorf("infer serve after SIGTERM: %v\n%s", err, s.stderr())
	}
}

func (s *served) stderr() string {
	s.cmd.mu.Lock()
	defer s.cmd.mu.Unlock()
	return s.cmd.stderr.String()
}

// waitLine waits for a stderr line containing text.
func (s *served) waitLine(t *testing.T, text string) {
	t.Helper()
	for l := range s.lines {
		if strings.Contains(l, text) {
			return
		}
	}
	t.Fatalf("infer serve ended without a line with %q:\n%s", text, s.stderr())
}

func serveModel(t *testing.T) string { return fixtures.Path(t, "arch", "tiny-qwen3.gguf") }

func promptParam(p string) openai.CompletionNewParamsPromptUnion {
	return openai.CompletionNewParamsPromptUnion{OfString: openai.String(p)}
}

// streamText streams a completion and returns its text, or the error
// where the stream failed as a text no completion equals (the callers
// compare completions).
func streamText(ctx context.Context, client openai.Client, p openai.CompletionNewParams, opts ...option.RequestOption) string {
	st := client.Completions.NewStreaming(ctx, p, opts...)
	var b strings.Builder
	for st.Next() {
		if ch := st.Current().Choices; len(ch) > 0 {
			b.WriteString(ch[0].Text)
		}
	}
	if err := st.Err(); err != nil {
		return "error: " + err.Error()
	}
	return b.String()
}

// streamed is a streamed completion's text and its tokens' logprobs.
type streamed struct {
	text   string
	tokens []string
	lps    []float64            // of the chosen tokens
	top    []map[string]float64 // the most likely tokens at each
}

// streamLogprobs streams a completion that asks for logprobs.
func streamLogprobs(t *testing.T, ctx context.Context, client openai.Client, p openai.CompletionNewParams) streamed {
	st := client.Completions.NewStreaming(ctx, p)
	var r streamed
	for st.Next() {
		if ch := st.Current().Choices; len(ch) > 0 {
			r.text += ch[0].Text
			lp := ch[0].Logprobs
			r.tokens, r.lps, r.top = append(r.tokens, lp.Tokens...), append(r.lps, lp.TokenLogprobs...), append(r.top, lp.TopLogprobs...)
		}
	}
	if err := st.Err(); err != nil {
		t.Errorf("stream: %v", err)
	}
	// The tokens' texts need not join to the text: a token that ends
	// inside a UTF-8 sequence is not valid JSON text on its own.
	if len(r.tokens) == 0 || len(r.lps) != len(r.tokens) || len(r.top) != len(r.tokens) {
		t.Errorf("logprobs of %d tokens (%d, %d) for %q", len(r.tokens), len(r.lps), len(r.top), r.text)
	}
	return r
}

// parts compares greedy stream b with a: -1 if they are equal, else the
// token at which they part and, unless a's two most likely tokens there
// were within tol of each other and b took the second, why that is wrong.
func (a streamed) parts(b streamed, tol float64) (int, string) {
	k := 0
	for k < len(a.tokens) && k < len(b.tokens) && a.tokens[k] == b.tokens[k] {
		k++
	}
	if k == len(a.tokens) && k == len(b.tokens) {
		return -1, ""
	}
	if k == len(a.tokens) || k == len(b.tokens) {
		return k, "one ends where the other goes on"
	}
	best := slices.Sorted(maps.Values(a.top[k]))
	slices.Reverse(best)
	theirs, ok := b.top[k][a.tokens[k]]
	switch {
	case len(best) < 2 || a.lps[k] != best[0]:
		return k, fmt.Sprintf("the lone run's token %q is not its most likely (%v)", a.tokens[k], a.top[k])
	case best[0]-best[1] > tol:
		return k, fmt.Sprintf("the lone run's two best are %.4f apart, more than %v (%v)", best[0]-best[1], tol, a.top[k])
	case a.top[k][b.tokens[k]] != best[1]:
		return k, fmt.Sprintf("took %q, not the lone run's second (%v)", b.tokens[k], a.top[k])
	case !ok || b.lps[k]-theirs > tol:
		return k, fmt.Sprintf("the lone run's %q is not within %v of %q in its own run (%v)", a.tokens[k], tol, b.tokens[k], b.top[k])
	}
	return k, ""
}

// TestServeSDK drives `infer serve` with OpenAI's Go SDK on the CPU
// backend and on Vulkan (lavapipe): a greedy completion equals
// `infer --temp 0`'s text, a streamed chat arrives in chunks and equals the
// whole answer, stop strings cut the text, and eight concurrent streams
// over four slots each equal what they give alone (decoded together on the
// CPU backend, interleaved over one sequence where the backend holds one).
func TestServeSDK(t *testing.T) {
	for _, backend := range []string{"cpu", "vulkan"} {
		t.Run(backend, func(t *testing.T) { testServeSDK(t, backend) })
	}
}

func testServeSDK(t *testing.T, backend string) {
	m := serveModel(t)
	s := startServe(t, "", "-m", m, "--backend", backend, "--parallel", "4", "--queue", "8")
	ctx := context.Background()
	// Every count of slots has its decode program before the first request.
	if log := s.stderr(); !strings.Contains(log, "decode programs of 1 to 4 sequences recorded") {
		t.Errorf("no warm-up line before serving:\n%s", log)
	}

	const prompt = "Once upon a time"
	cli := infer(t, "-m", m, "--backend", backend, "-p", prompt, "-n", "32", "--temp", "0", "--json")
	if cli.code != 0 {
		t.Fatalf("infer: %s", cli.stderr)
	}
	want := decodeRun(t, cli.stdout)
	c, err := s.client.Completions.New(ctx, openai.CompletionNewParams{Model: "tiny-qwen3", Prompt: promptParam(prompt),
		MaxTokens: openai.Int(32), Temperature: openai.Float(0)})
	if err != nil {
		t.Fatal(err)
	}
	if c.Choices[0].Text != want.Text || c.Usage.PromptTokens != int64(len(want.PromptTokens)) || c.Usage.CompletionTokens != int64(want.Timings.PredictedN) {
		t.Fatalf("served %q (usage %+v)\ninfer  %q (%d prompt tokens, %d predicted)", c.Choices[0].Text, c.Usage, want.Text, len(want.PromptTokens), want.Timings.PredictedN)
	}

	t.Run("chat stream", func(t *testing.T) {
		p := openai.ChatCompletionNewParams{Model: "tiny-qwen3", MaxTokens: openai.Int(24), Temperature: openai.Float(0),
			Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("You are brief."), openai.UserMessage("Tell me a story.")}}
		whole, err := s.client.Chat.Completions.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		st := s.client.Chat.Completions.NewStreaming(ctx, p)
		var acc openai.ChatCompletionAccumulator
		chunks := 0
		for st.Next() {
			acc.AddChunk(st.Current())
			chunks++
		}
		if err := st.Err(); err != nil {
			t.Fatal(err)
		}
		if chunks < 4 {
			t.Errorf("%d chunks", chunks)
		}
		if got := acc.Choices[0].Message.Content; got != whole.Choices[0].Message.Content || acc.Usage.TotalTokens != whole.Usage.TotalTokens {
			t.Errorf("streamed %q (usage %+v), whole %q (usage %+v)", got, acc.Usage, whole.Choices[0].Message.Content, whole.Usage)
		}
	})

	t.Run("stop", func(t *testing.T) {
		// Cut at a piece from the middle of the greedy text.
		text := want.Text
		stop := text[len(text)/2 : len(text)/2+2]
		c, err := s.client.Completions.New(ctx, openai.CompletionNewParams{Model: "tiny-qwen3", Prompt: promptParam(prompt),
			MaxTokens: openai.Int(32), Temperature: openai.Float(0), Stop: openai.CompletionNewParamsStopUnion{OfStringArray: []string{"\x00never", stop}}})
		if err != nil {
			t.Fatal(err)
		}
		if w := text[:strings.Index(text, stop)]; c.Choices[0].Text != w || c.Choices[0].FinishReason != "stop" {
			t.Errorf("stop %q: %q (%s), want %q", stop, c.Choices[0].Text, c.Choices[0].FinishReason, w)
		}
	})

	t.Run("8 streams", func(t *testing.T) {
		// Greedy, with each token's two most likely: the Vulkan engine
		// prefills prompts that arrive together in row programs, whose
		// logits differ from a lone prompt's by up to about 1e-3 of the
		// largest (TestEvalBatchVulkan), so a stream may part from its lone
		// text only where the lone run's two best tokens were that close.
		run := func(i int) streamed {
			return streamLogprobs(t, ctx, s.client, openai.CompletionNewParams{Model: "tiny-qwen3",
				Prompt: promptParam(fmt.Sprintf("Story %d: once", i)), MaxTokens: openai.Int(int64(16 + 3*i)),
				Temperature: openai.Float(0), Logprobs: openai.Int(2)})
		}
		alone := make([]streamed, 8)
		for i := range alone {
			alone[i] = run(i)
		}
		together := make([]streamed, 8)
		var wg sync.WaitGroup
		for i := range together {
			wg.Go(func() { together[i] = run(i) })
		}
		wg.Wait()
		parted := 0
		for i := range alone {
			k, why := alone[i].parts(together[i], 0.05)
			if why != "" {
				t.Errorf("stream %d parts at token %d: %s\nconcurrently %q\nalone        %q", i, k, why, together[i].text, alone[i].text)
			}
			if k >= 0 {
				parted++
			}
		}
		t.Logf("%d of 8 streams parted from their lone text at a near-tie", parted)
		if backend == "cpu" {
			// Sampled, each stream with its own seed: each slot draws from a
			// sampler of its own. The CPU engine's rows equal a lone
			// evaluation to 1e-5, so the texts are equal.
			sampled := func(i int) string {
				return streamText(ctx, s.client, openai.CompletionNewParams{Model: "tiny-qwen3",
					Prompt: promptParam(fmt.Sprintf("Story %d: once", i)), MaxTokens: openai.Int(int64(16 + 3*i)),
					Temperature: openai.Float(0.8), Seed: openai.Int(int64(i))})
			}
			lone := make([]string, 8)
			for i := range lone {
				lone[i] = sampled(i)
			}
			conc := make([]string, 8)
			for i := range conc {
				wg.Go(func() { conc[i] = sampled(i) })
			}
			wg.Wait()
			for i := range lone {
				if conc[i] != lone[i] {
					t.Errorf("sampled stream %d: %q concurrently, %q alone", i, conc[i], lone[i])
				}
			}
		}
		// On a backend that decodes several sequences together each slot
		// keeps a sequence of its own; on one that holds one, streams
		// longer than the quantum (32 tokens) gave the cache up to others
		// and came back to it.
		switched := regexp.MustCompile(`[1-9][0-9]* switches re-evaluated [1-9]`).MatchString(s.stderr())
		if batched := strings.Contains(s.stderr(), "decoded together"); switched == batched {
			t.Errorf("decoded together %v, but switches between sequences %v:\n%s", batched, switched, s.stderr())
		}
	})
}

// TestServeErrors: malformed JSON and an oversized prompt get 400, a wrong
// key 401, a full queue 503, and a client that disconnects mid-stream
// frees its slot for the next request.
func TestServeErrors(t *testing.T) {
	s := startServe(t, "sesame", "-m", serveModel(t), "--backend", "cpu", "-c", "8192", "--parallel", "1", "--queue", "0", "--api-key", "sesame")
	ctx := context.Background()
	status := func(err error) (int, string) {
		var e *openai.Error
		if !errors.As(err, &e) {
			t.Fatalf("want an API error, got %v", err)
		}
		return e.StatusCode, e.Code
	}
	req, _ := http.NewRequest("POST", s.url+"/v1/chat/completions", strings.NewReader(`{"messages": [`))
	req.Header.Set("Authorization", "Bearer sesame")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(b), `"invalid_request_error"`) {
		t.Errorf("malformed JSON: %d %s", resp.StatusCode, b)
	}
	_, err = s.client.Completions.New(ctx, openai.CompletionNewParams{Model: "m", Prompt: promptParam(strings.Repeat("once upon a time ", 3000))})
	if got, code := status(err); got != 400 || code != "context_length_exceeded" {
		t.Errorf("oversized prompt: %d %s %v", got, code, err)
	}
	_, err = s.client.Completions.New(ctx, openai.CompletionNewParams{Model: "m", Prompt: promptParam("hi")}, option.WithAPIKey("wrong"))
	if got, _ := status(err); got != 401 {
		t.Errorf("wrong key: %d %v", got, err)
	}

	// One slot, no queue: a stream that runs to the end of an 8192-token
	// context holds the only slot until its client goes away.
	sctx, cancel := context.WithCancel(ctx)
	st := s.client.Completions.NewStreaming(sctx, openai.CompletionNewParams{Model: "m", Prompt: promptParam("Once")},
		option.WithJSONSet("ignore_eos", true))
	if !st.Next() {
		t.Fatalf("no first chunk: %v", st.Err())
	}
	_, err = s.client.Completions.New(ctx, openai.CompletionNewParams{Model: "m", Prompt: promptParam("hi"), MaxTokens: openai.Int(2)})
	if got, _ := status(err); got != 503 {
		t.Errorf("queue full: %d %v", got, err)
	}
	cancel()
	st.Close()
	s.waitLine(t, "finish cancelled")
	c, err := s.client.Completions.New(ctx, openai.CompletionNewParams{Model: "m", Prompt: promptParam("hi"), MaxTokens: openai.Int(2)})
	if err != nil || c.Usage.CompletionTokens != 2 {
		t.Errorf("after the disconnect: %+v, %v", c, err)
	}
}

// TestServeShutdown: SIGTERM lets a stream in flight finish with [DONE],
// and the server exits 0.
func TestServeShutdown(t *testing.T) {
	s := startServe(t, "", "-m", serveModel(t), "--backend", "cpu")
	resp, err := http.Post(s.url+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt": "Once", "max_tokens": 200, "ignore_eos": true, "stream": true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	if _, err := r.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	s.cmd.signal(syscall.SIGTERM)
	rest, err := io.ReadAll(r)
	if err != nil || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Errorf("the stream after SIGTERM: %v, ends %q", err, rest[max(0, len(rest)-200):])
	}
	s.cmd.signal = nil
	for range s.lines {
	}
	if err := s.cmd.wait(); err != nil {
		t.Errorf("exit: %v\n%s", err, s.stderr())
	}
}

// TestStreamedParts: the comparison of greedy streams lets one part from
// the other only at a near-tie, to the second most likely token.
func TestStreamedParts(t *testing.T) {
	at := func(toks []string, lps []float64, tops ...map[string]float64) streamed {
		return streamed{tokens: toks, lps: lps, top: tops}
	}
	a := at([]string{"x", "y"}, []float64{-0.1, -0.5}, map[string]float64{"x": -0.1, "q": -3}, map[string]float64{"y": -0.5, "z": -0.52})
	for _, c := range []struct {
		name string
		b    streamed
		k    int
		ok   bool
	}{
		{"equal", a, -1, true},
		{"near-tie", at([]string{"x", "z"}, []float64{-0.1, -0.49}, a.top[0], map[string]float64{"z": -0.49, "y": -0.51}), 1, true},
		{"wide gap", at([]string{"q", "y"}, []float64{-0.1, -0.5}, map[string]float64{"q": -0.1, "x": -0.11}, a.top[1]), 0, false},
		{"not the second", at([]string{"x", "w"}, []float64{-0.1, -0.4}, a.top[0], map[string]float64{"w": -0.4, "y": -0.41}), 1, false},
		{"far in its own run", at([]string{"x", "z"}, []float64{-0.1, -0.1}, a.top[0], map[string]float64{"z": -0.1, "y": -0.9}), 1, false},
		{"ends early", at([]string{"x"}, []float64{-0.1}, a.top[0]), 1, false},
	} {
		k, why := a.parts(c.b, 0.05)
		if k != c.k || (why == "") != c.ok {
			t.Errorf("%s: parts at %d (%q), want %d and ok %v", c.name, k, why, c.k, c.ok)
		}
	}
}
