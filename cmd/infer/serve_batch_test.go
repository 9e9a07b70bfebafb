package main

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/vkinfer/vkinfer/backend"
	"github.com/vkinfer/vkinfer/backend/cpu"
	"github.com/vkinfer/vkinfer/gguf"
	"github.com/vkinfer/vkinfer/internal/vktest"
	"github.com/vkinfer/vkinfer/model"
	"github.com/vkinfer/vkinfer/server"
	"github.com/vkinfer/vkinfer/vk/engine"
)

// gatedModel counts the prompts the server has tokenized.
type gatedModel struct {
	*servedModel
	prompts atomic.Int32
}

func (g *gatedModel) Tokenize(text string) []int32 {
	defer g.prompts.Add(1)
	return g.servedModel.Tokenize(text)
}

// gatedEngine evaluates under gate: a test holding it keeps the steps
// back (so requests sent together are all queued before the first), and
// reads the counters.
type gatedEngine struct {
	*seqEngine
	gate *sync.Mutex
}

func (g gatedEngine) Eval(batch []server.Seq) error {
	g.gate.Lock()
	defer g.gate.Unlock()
	return g.seqEngine.Eval(batch)
}

// TestServeBatched: the server on seqEngine over 8 sequences of the CPU
// backend, and of the Vulkan engine, decodes concurrent requests together:
// 8 streams of 16 tokens take about 15 decoding passes (the 16th token is
// sampled, never evaluated), not 120, and each stream equals its output
// alone.
func TestServeBatched(t *testing.T) {
	for _, name := range []string{"cpu", "vulkan"} {
		t.Run(name, func(t *testing.T) {
			var be backend.Backend = cpu.New(2)
			if name == "vulkan" {
				e, err := engine.New(vktest.Open(t), engine.Options{})
				if err != nil {
					t.Fatal(err)
				}
				be = e
			}
			testServeBatched(t, be)
		})
	}
}

func testServeBatched(t *testing.T, be backend.Backend) {
	f, err := gguf.Open(serveModel(t))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := model.Load(f, be, model.Options{Context: 128, Seqs: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	eng, err := newSeqEngine(m)
	if err != nil {
		t.Fatal(err)
	}
	gm := &gatedModel{servedModel: &servedModel{m: m, name: "tiny"}}
	var gate sync.Mutex
	srv, err := server.New(server.Config{Model: gm, Engine: gatedEngine{eng, &gate}, Parallel: 8, Queue: 8})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer func() {
		hs.Close()
		srv.Close()
	}()
	client := openai.NewClient(option.WithBaseURL(hs.URL+"/v1"), option.WithMaxRetries(0))

	const streams, tokens = 8, 16
	run := func(i int) string {
		return streamText(context.Background(), client, openai.CompletionNewParams{Model: "tiny",
			Prompt:    promptParam(fmt.Sprintf("Story %d:%s once", i, strings.Repeat(" so", i))),
			MaxTokens: openai.Int(tokens), Temperature: openai.Float(0.8), Seed: openai.Int(int64(i))},
			option.WithJSONSet("ignore_eos", true))
	}
	alone := make([]string, streams)
	for i := range alone {
		alone[i] = run(i)
	}
	gate.Lock()
	if want := int64(streams * (tokens - 1)); eng.decoded.Load() != want || eng.passes.Load() != want {
		t.Fatalf("alone: %d tokens decoded in %d passes, want %d in as many", eng.decoded.Load(), eng.passes.Load(), want)
	}
	eng.passes.Store(0)
	eng.decoded.Store(0)
	eng.prefills.Store(0)
	gm.prompts.Store(0)
	together := make([]string, streams)
	var wg sync.WaitGroup
	for i := range together {
		wg.Go(func() { together[i] = run(i) })
	}
	// Every prompt tokenized, and a moment for the handlers to queue them.
	for gm.prompts.Load() < streams {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	gate.Unlock()
	wg.Wait()
	gate.Lock()
	defer gate.Unlock()
	for i := range alone {
		if together[i] != alone[i] {
			t.Errorf("stream %d: %q together, %q alone", i, together[i], alone[i])
		}
	}
	// A token decoded in the pass that prefills a later stream's prompt
	// counts as prefill, not as decoding (seqEngine.passes).
	if want, d := int64(streams*(tokens-1)), eng.decoded.Load(); d > want || d < want-streams || eng.passes.Load() > tokens+2 {
		t.Errorf("together: %d tokens decoded in %d passes, want %d (less those beside prompts) in about %d", d, eng.passes.Load(), want, tokens-1)
	}
	// The first prompt may reach an Eval (which waits at the gate) before
	// the others queue; those prefill together in the next.
	if p := eng.prefills.Load(); p > 2 {
		t.Errorf("together: the prompts prefilled in %d Evals, want at most 2", p)
	}
	t.Logf("together: %d tokens decoded in %d passes", eng.decoded.Load(), eng.passes.Load())
}

// TestLoadgen runs `infer loadgen` on tiny-qwen3 (CPU): a row per level
// with every token generated, and the streams of a level decoded together
// (more than one sequence a pass at three streams), with a decode rate
// no lower than the total rate (which adds prompts and sampling).
func TestLoadgen(t *testing.T) {
	r := infer(t, "loadgen", "-m", serveModel(t), "--backend", "cpu", "--concurrent", "1,3", "-n", "8", "--prompt-tokens", "5")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	// The decode programs of every count are recorded before anything is timed.
	if !strings.Contains(r.stderr, "loadgen: decode programs of 1 to 3 sequences recorded") {
		t.Errorf("no warm-up line on stderr:\n%s", r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 {
		t.Fatalf("want a header and 2 rows:\n%s", r.stdout)
	}
	for i, want := range []struct{ streams, tokens string }{{"1", "8"}, {"3", "24"}} {
		f := strings.Fields(lines[i+1])
		n := len(f)
		if n < 9 || f[n-9] != want.streams || f[n-6] != want.tokens {
			t.Fatalf("row %d: %q, want %s streams and %s tokens", i, lines[i+1], want.streams, want.tokens)
		}
		perPass, err := strconv.ParseFloat(f[n-2], 64)
		if err != nil || i == 0 && perPass != 1 || i == 1 && perPass <= 1 {
			t.Errorf("row %d: %v sequences a pass (%v)", i, perPass, err)
		}
		total, err1 := strconv.ParseFloat(f[n-4], 64)
		decode, err2 := strconv.ParseFloat(f[n-1], 64)
		if err1 != nil || err2 != nil || decode < total {
			t.Errorf("row %d: decode rate %v below the total rate %v (%v, %v)", i, decode, total, err1, err2)
		}
	}
}
