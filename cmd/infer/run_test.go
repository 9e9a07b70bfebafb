package main

import (
	"encoding/json"
	"io"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vkinfer/vkinfer/internal/fixtures"
	"github.com/vkinfer/vkinfer/model"
)

// decodeRun reads --json output: stdout must hold exactly one JSON object
// with the documented keys (README, CLI section) and nothing else.
func decodeRun(t *testing.T, stdout string) runReport {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(stdout))
	var raw map[string]json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		t.Fatalf("stdout is not a JSON object: %v\n%q", err, stdout)
	}
	if tok, err := dec.Token(); err != io.EOF {
		t.Fatalf("stdout holds more than one JSON document (next: %v, %v)\n%q", tok, err, stdout)
	}
	want := []string{"model", "prompt", "prompt_tokens", "tokens", "text", "stop", "seed", "timings"}
	if got := slices.Sorted(maps.Keys(raw)); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		t.Errorf("keys %v, want %v", got, want)
	}
	var timings map[string]float64
	if err := json.Unmarshal(raw["timings"], &timings); err != nil {
		t.Fatalf("timings: %v", err)
	}
	wantT := []string{"load_ms", "prompt_n", "prompt_ms", "prompt_per_token_ms", "prompt_per_second",
		"predicted_n", "predicted_ms", "predicted_per_token_ms", "predicted_per_second"}
	if got := slices.Sorted(maps.Keys(timings)); !slices.Equal(got, slices.Sorted(slices.Values(wantT))) {
		t.Errorf("timings keys %v, want %v", got, wantT)
	}
	var r runReport
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestRunJSON: greedy generation with --json gives llama.cpp's prompt
// tokens and its 48 greedy tokens, on the CPU and the GPU engine, with
// timings that add up and the usual timing lines still on stderr.
func TestRunJSON(t *testing.T) {
	g := readGolden(t, "golden", "stories260K.once.cpu-f32.json")
	model := fixtures.Path(t, "stories260K.gguf")
	for _, be := range []string{"cpu", "vulkan"} {
		t.Run(be, func(t *testing.T) {
			r := infer(t, "-m", model, "-p", "Once upon a time", "-n", "48", "--temp", "0", "--seed", "7", "--json", "--backend", be)
			if r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			rep := decodeRun(t, r.stdout)
			if !slices.Equal(rep.PromptTokens, g.Tokens) {
				t.Errorf("prompt_tokens %v, want %v", rep.PromptTokens, g.Tokens)
			}
			if !slices.Equal(rep.Tokens, g.Greedy) {
				t.Errorf("tokens %v\nwant   %v", rep.Tokens, g.Greedy)
			}
			if rep.Text != g.Text || rep.Prompt != "Once upon a time" || rep.Model != model || rep.Stop != "limit" || rep.Seed != 7 {
				t.Errorf("text %q, prompt %q, model %q, stop %q, seed %d", rep.Text, rep.Prompt, rep.Model, rep.Stop, rep.Seed)
			}
			tm := rep.Timings
			if tm.PromptN != len(g.Tokens) || tm.PredictedN != 48 || tm.LoadMS <= 0 || tm.PromptMS <= 0 || tm.PredictedMS <= 0 {
				t.Errorf("timings %+v", tm)
			}
			for _, c := range [][3]float64{{tm.PromptMS, tm.PromptPerTokenMS, tm.PromptPerSecond}, {tm.PredictedMS, tm.PredictedPerTokenMS, tm.PredictedPerSecond}} {
				n := c[0] / c[1]
				if d := n*1000/c[0] - c[2]; d*d > 1e-6*c[2]*c[2] {
					t.Errorf("timings %+v: per token and per second disagree", tm)
				}
			}
			for _, s := range []string{"backend: " + map[string]string{"cpu": "CPU", "vulkan": "Vulkan"}[be], "load time", "prompt eval time", "eval time", "tokens per second"} {
				if !strings.Contains(r.stderr, s) {
					t.Errorf("stderr lacks %q:\n%s", s, r.stderr)
				}
			}
		})
	}
}

// TestRunJSONErrors: with --json a failure is still one error line and exit
// status 1, and stdout stays empty (no half document for a script to parse).
func TestRunJSONErrors(t *testing.T) {
	story := fixtures.Path(t, "stories260K.gguf")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-m", "/nonexistent/model.gguf", "-p", "x"}, "no such file"},
		{[]string{"-m", story, "-p", strings.Repeat("Once upon a time ", 20), "-c", "32", "-n", "8"}, "exceed the context"},
		{[]string{"-m", story, "-p", "x", "--backend", "metal"}, "--backend"},
	} {
		r := infer(t, append(c.args, "--json")...)
		if r.code != 1 || !strings.HasPrefix(lastLine(r.stderr), "error: ") || !strings.Contains(lastLine(r.stderr), c.want) || r.stdout != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 1, no stdout and a last line \"error: …%s…\"", c.args, r.code, r.stdout, r.stderr, c.want)
		}
	}
}

// TestInterruptJSON: Ctrl-C during a --json run still prints the one
// object, with what was generated so far and stop "interrupted".
func TestInterruptJSON(t *testing.T) {
	out, errs := interrupt(t, "--json")
	rep := decodeRun(t, out)
	if rep.Stop != "interrupted" || len(rep.Tokens) == 0 || rep.Timings.PredictedN != len(rep.Tokens) ||
		!strings.HasPrefix(rep.Text, ", there was") {
		t.Errorf("stop %q, %d tokens, predicted_n %d, text %.40q…\n%s", rep.Stop, len(rep.Tokens), rep.Timings.PredictedN, rep.Text, errs)
	}
}

func TestStopReason(t *testing.T) {
	for _, c := range []struct {
		interrupted bool
		sampled     int
		emitted     int
		want        string
	}{
		{false, 8, 8, "limit"},
		{false, 5, 4, "eog"}, // the fifth token sampled ended generation
		{false, 1, 0, "eog"},
		{true, 3, 3, "interrupted"},
		{false, 0, 0, "limit"}, // -n 0
	} {
		st := model.Stats{GenTokens: c.sampled, GenTime: time.Millisecond}
		if got := stopReason(c.interrupted, st, c.emitted); got != c.want {
			t.Errorf("stopReason(%v, %d sampled, %d emitted) = %q, want %q", c.interrupted, c.sampled, c.emitted, got, c.want)
		}
	}
}

// TestRunJSONArch: greedy --json runs on the tiny Qwen3, Gemma 3, Phi-3 and
// Llama 3.1 models give llama.cpp's prompt tokens and its greedy tokens (CPU
// engine against llama.cpp's CPU backend, both F32) up to the first step
// whose top two logits are within 1e-3. llama.cpp's Phi-3 continuation ends
// at an end-of-generation token before 48, which --json reports as stop
// "eog" without the token.
func TestRunJSONArch(t *testing.T) {
	for _, name := range []string{"tiny-qwen3", "tiny-gemma3", "tiny-phi3", "tiny-llama31"} {
		t.Run(name, func(t *testing.T) {
			g := readGolden(t, "arch", "golden", name+".lily.cpu-f32.json")
			r := infer(t, "-m", fixtures.Path(t, "arch", name+".gguf"), "-p", g.Prompt, "-n", "48", "--temp", "0", "--json", "--backend", "cpu")
			if r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			rep := decodeRun(t, r.stdout)
			if !slices.Equal(rep.PromptTokens, g.Tokens) {
				t.Errorf("prompt_tokens %v, want %v", rep.PromptTokens, g.Tokens)
			}
			n := len(g.Greedy)
			for i, top := range g.GreedyTop {
				if top[0][1].(float64)-top[1][1].(float64) < 1e-3 {
					n = i
					break
				}
			}
			// llama.cpp's continuation ends with the end-of-generation token
			// that stopped it; --json does not emit that token.
			eog := n == len(g.Greedy) && n < 48
			want := g.Greedy[:n]
			if eog {
				want = want[:n-1]
			}
			if len(rep.Tokens) < len(want) || !slices.Equal(rep.Tokens[:len(want)], want) {
				t.Errorf("tokens %v\nwant   %v… (llama.cpp's up to its first near-tie)", rep.Tokens, want)
			}
			if eog && (rep.Stop != "eog" || len(rep.Tokens) != n-1 || rep.Timings.PredictedN != n) {
				t.Errorf("stop %q, %d tokens, predicted_n %d; want eog after %d tokens", rep.Stop, len(rep.Tokens), rep.Timings.PredictedN, n-1)
			}
		})
	}
}

// TestRunProfile: --profile prints the per-op table, --profile=waterfall
// the table and the last decode token's waterfall (its layers' summaries
// and the token's), and a bad value is one error line.
func TestRunProfile(t *testing.T) {
	story := fixtures.Path(t, "stories260K.gguf")
	args := []string{"-m", story, "-p", "Once", "-n", "3", "--temp", "0", "--backend", "vulkan"}
	ops := infer(t, append(args, "--profile")...)
	if ops.code != 0 || !strings.Contains(ops.stderr, "µs/call") || strings.Contains(ops.stderr, "waterfall") {
		t.Errorf("--profile: exit %d, stderr:\n%s", ops.code, ops.stderr)
	}
	w := infer(t, append(args, "--profile=waterfall")...)
	if w.code != 0 || !strings.Contains(w.stderr, "µs/call") || !strings.Contains(w.stderr, "waterfall of the decode token at position 3") {
		t.Fatalf("--profile=waterfall: exit %d, stderr:\n%s", w.code, w.stderr)
	}
	// stories260K has 5 layers: a summary for each, the input's, the
	// output's and the token's.
	for _, s := range []string{"layer in ", "layer 0 ", "layer 4 ", "layer out ", "token "} {
		if strings.Count(w.stderr, "\n"+strings.Repeat(" ", 10-len(strings.Fields(s)[0]))+s) != 1 {
			t.Errorf("--profile=waterfall: not one %q summary:\n%s", s, w.stderr)
		}
	}
	// A run that fails before its first dispatch prints its error alone,
	// not an empty table.
	over := infer(t, "-m", story, "-c", "4", "-p", "Once upon a time there was a little girl", "-n", "3", "--backend", "vulkan", "--profile")
	if over.code != 1 || strings.Contains(over.stderr, "µs/call") || !strings.Contains(lastLine(over.stderr), "exceed the context of 4") {
		t.Errorf("--profile past the context: exit %d, stderr:\n%s", over.code, over.stderr)
	}
	bad := infer(t, append(args, "--profile=gantt")...)
	if last := lastLine(bad.stderr); bad.code != 1 || !strings.Contains(last, `--profile "gantt"`) || strings.Count(bad.stderr, "error:") != 1 {
		t.Errorf("--profile=gantt: exit %d, stderr %q", bad.code, bad.stderr)
	}
}
