// Package bench measures prompt-processing and generation throughput the way
// llama.cpp's llama-bench does, so that our figures and theirs can sit in one
// table: the same tests (pp, tg and pp+tg, each at a KV-cache depth), the same
// method (a warm-up, then repetitions that time only the test) and the same
// output formats (markdown, csv, json, jsonl).
package bench

import (
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/vkinfer/vkinfer/backend"
	"github.com/vkinfer/vkinfer/gguf"
	"github.com/vkinfer/vkinfer/model"
	"github.com/vkinfer/vkinfer/model/synth"
)

// Config is one benchmark run. Every combination of the lists is measured;
// the comments name the llama-bench flag each field mirrors.
type Config struct {
	Models    []string // -m: GGUF paths or synth:PRESET[:FTYPE]
	Prompt    []int    // -p: prompt sizes; 0 is skipped
	Gen       []int    // -n: generation lengths; 0 is skipped
	PG        []PG     // -pg: prompt then generation, timed together
	Depth     []int    // -d: KV-cache depth each test starts at
	UBatch    []int    // -ub: prompt tokens per forward program
	FlashAttn []int    // -fa: 0 or 1
	Waves     []int    // --wave: flash-attention wave, 32 or 64; 0 is auto
	// CoopMat (--coopmat): prefill products on cooperative matrices, each
	// of "auto", "on", "off" or "int8" (on, with the integer variant for
	// quantized weights).
	CoopMat []string
	Reps    int // -r: timed repetitions of each test
	Threads int // -t: recorded for the CPU backend (0: one per core)

	// Open opens a fresh backend for one combination of the backend's own
	// settings. The runner closes it.
	Open func(Instance) (backend.Backend, error)
	// Log receives the depth-fill progress and, with Progress set,
	// llama-bench's per-step progress lines. Nil discards them.
	Log      io.Writer
	Progress bool
	// Seed makes the random token ids reproducible.
	Seed uint64
}

// Instance is what a backend is opened with: the wave, flash attention or
// the plain attention kernel, and the --coopmat setting.
type Instance struct {
	Wave      int
	FlashAttn bool
	CoopMat   string
}

// PG is a -pg test: Prompt tokens in one pass, then Gen single-token passes.
type PG struct{ Prompt, Gen int }

// Defaults are llama-bench's defaults, plus wave auto.
func Defaults() Config {
	return Config{
		Prompt:    []int{512},
		Gen:       []int{128},
		Depth:     []int{0},
		UBatch:    []int{512},
		FlashAttn: []int{1},
		Waves:     []int{0},
		CoopMat:   []string{"auto"},
		Reps:      5,
	}
}

// Validate checks c before anything is loaded, naming the flag at fault.
func (c *Config) Validate() error {
	if len(c.Models) == 0 {
		return fmt.Errorf("no model given: use -m model.gguf (or synth:PRESET)")
	}
	each := func(flag string, vs []int, ok func(int) bool, want string) error {
		if len(vs) == 0 {
			return fmt.Errorf("%s: empty list", flag)
		}
		for _, v := range vs {
			if !ok(v) {
				return fmt.Errorf("%s %d: %s", flag, v, want)
			}
		}
		return nil
	}
	nonNeg := func(v int) bool { return v >= 0 }
	for _, e := range []error{
		each("-p", c.Prompt, nonNeg, "want a prompt size of 0 or more"),
		each("-n", c.Gen, nonNeg, "want a generation length of 0 or more"),
		each("-d", c.Depth, nonNeg, "want a depth of 0 or more"),
		each("-ub", c.UBatch, func(v int) bool { return v > 0 }, "want a ubatch size of 1 or more"),
		each("-fa", c.FlashAttn, func(v int) bool { return v == 0 || v == 1 }, "want 0 or 1"),
		each("--wave", c.Waves, func(v int) bool { return v == 0 || v == 32 || v == 64 }, "want 32, 64 or auto"),
	} {
		if e != nil {
			return e
		}
	}
	if len(c.CoopMat) == 0 {
		return fmt.Errorf("--coopmat: empty list")
	}
	for _, v := range c.CoopMat {
		if v != "auto" && v != "on" && v != "off" && v != "int8" {
			return fmt.Errorf("--coopmat %q: want on, off, auto or int8", v)
		}
	}
	for _, pg := range c.PG {
		if pg.Prompt < 0 || pg.Gen < 0 {
			return fmt.Errorf("-pg %d,%d: want sizes of 0 or more", pg.Prompt, pg.Gen)
		}
	}
	if c.Reps < 1 {
		return fmt.Errorf("-r %d: want at least one repetition", c.Reps)
	}
	if c.Threads < 0 {
		return fmt.Errorf("-t %d: want a thread count of 0 (one per core) or more", c.Threads)
	}
	if len(c.tests()) == 0 {
		return fmt.Errorf("nothing to measure: every -p, -n and -pg is 0")
	}
	if c.Open == nil {
		return fmt.Errorf("bench: Config.Open is nil")
	}
	return nil
}

// Test is one measurement: Prompt tokens in one forward pass, then Gen
// single-token passes, starting at KV-cache position Depth.
type Test struct{ Prompt, Gen, Depth int }

// Name is llama-bench's test label: pp512, tg128, pp512+tg128, with
// " @ d8192" when the test starts at a depth.
func (t Test) Name() string {
	var s string
	switch {
	case t.Gen == 0:
		s = fmt.Sprintf("pp%d", t.Prompt)
	case t.Prompt == 0:
		s = fmt.Sprintf("tg%d", t.Gen)
	default:
		s = fmt.Sprintf("pp%d+tg%d", t.Prompt, t.Gen)
	}
	if t.Depth > 0 {
		s += fmt.Sprintf(" @ d%d", t.Depth)
	}
	return s
}

// tests lists the tests at depth 0 in llama-bench's order: prompt sizes,
// generation lengths, then pp+tg pairs, skipping empty ones.
func (c *Config) tests() []Test {
	var ts []Test
	for _, p := range c.Prompt {
		if p > 0 {
			ts = append(ts, Test{Prompt: p})
		}
	}
	for _, n := range c.Gen {
		if n > 0 {
			ts = append(ts, Test{Gen: n})
		}
	}
	for _, pg := range c.PG {
		if pg.Prompt > 0 || pg.Gen > 0 {
			ts = append(ts, Test{Prompt: pg.Prompt, Gen: pg.Gen})
		}
	}
	return ts
}

// contextFor is the KV cache the tests at depth need, padded to a multiple
// of 256 as llama.cpp pads n_ctx. llama-bench sizes each test's context as
// n_prompt + n_gen + n_depth; a shared context sized for the deepest test
// would make shallow ones pay for it (the split-k count of attention
// follows the context, and decode at depth 0 ran 5 % slower at 17k than at
// 256 on an H200).
func (c *Config) contextFor(depth int) int {
	need := 0
	for _, t := range c.tests() {
		need = max(need, depth+t.Prompt+t.Gen)
	}
	return (need + 255) / 256 * 256
}

// Run measures every combination in c, in llama-bench's order (model, wave,
// coopmat, ubatch, fa, depth, then the tests), and hands each result to
// emit as soon as it is measured. A model is loaded once per (wave,
// coopmat, ubatch, fa, depth):
// those are fixed when the backend, its KV cache and the model's programs
// are made.
func Run(c Config, emit func(Result) error) error {
	if err := c.Validate(); err != nil {
		return err
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	// Every model is opened before anything is measured, so a wrong path
	// fails at once rather than after an hour of other models.
	files := make([]*gguf.File, len(c.Models))
	defer func() {
		for _, f := range files {
			if f != nil {
				f.Close()
			}
		}
	}()
	for i, spec := range c.Models {
		path, err := synth.Resolve(spec, nil)
		if err != nil {
			return err
		}
		if files[i], err = gguf.Open(path); err != nil {
			return err
		}
	}
	r := &runner{c: c, rng: rand.New(rand.NewPCG(c.Seed, 0x62656e6368)), build: readBuild(),
		total: len(c.Models) * len(c.Waves) * len(c.CoopMat) * len(c.UBatch) * len(c.FlashAttn) * len(c.Depth) * len(c.tests())}
	for i, f := range files {
		for _, wave := range c.Waves {
			for _, cm := range c.CoopMat {
				for _, ub := range c.UBatch {
					for _, fa := range c.FlashAttn {
						in := Instance{Wave: wave, FlashAttn: fa == 1, CoopMat: cm}
						if err := r.instance(c.Models[i], f, in, ub, emit); err != nil {
							return err
						}
					}
				}
			}
		}
	}
	return nil
}

type runner struct {
	c     Config
	rng   *rand.Rand
	ids   []int32
	vocab int // of the loaded model: the range of the random ids
	build build
	done  int // results measured so far, for the progress lines
	total int
}

// instance measures the tests of one (model, backend settings, ubatch) at
// every depth.
func (r *runner) instance(spec string, f *gguf.File, in Instance, ub int, emit func(Result) error) error {
	for _, depth := range r.c.Depth {
		if err := r.atDepth(spec, f, in, ub, depth, emit); err != nil {
			return err
		}
	}
	return nil
}

// atDepth loads the model on a fresh backend with the context the tests at
// depth need, fills the cache to depth and measures the tests.
func (r *runner) atDepth(spec string, f *gguf.File, in Instance, ub, depth int, emit func(Result) error) error {
	be, err := r.c.Open(in)
	if err != nil {
		return err
	}
	fa := 0
	if in.FlashAttn {
		fa = 1
	}
	ctx := r.c.contextFor(depth)
	r.logf("loading %s (wave %s, coopmat %s, ubatch %d, fa %d, context %d)", spec, waveName(in.Wave), in.CoopMat, ub, fa, ctx)
	m, err := model.Load(f, be, model.Options{Context: ctx, UBatch: ub})
	if err != nil {
		be.Close()
		return err
	}
	defer m.Close()
	if c := m.Cache; c.TotalSlots() < c.Layers*c.Context {
		r.logf("sliding-window layers keep rings: the KV cache holds %d of %d positions", c.TotalSlots(), c.Layers*c.Context)
	}
	r.vocab = m.HP.Vocab
	base := r.describe(spec, f, be, ub)
	base.FlashAttn = fa
	if err := r.fill(m, depth); err != nil {
		return err
	}
	for _, t := range r.c.tests() {
		t.Depth = depth
		res := base
		if err := r.measure(m, t, &res); err != nil {
			return fmt.Errorf("%s %s: %w", spec, t.Name(), err)
		}
		if err := emit(res); err != nil {
			return err
		}
	}
	return nil
}

// fill writes depth positions of the KV cache with random tokens, once per
// depth. It stands in for llama-bench's snapshot and restore: a forward
// pass at position pos leaves the cache below pos untouched, so every
// repetition of every test at this depth can start at pos=depth without
// restoring anything.
func (r *runner) fill(m *model.Model, depth int) error {
	if depth == 0 {
		return nil
	}
	var last time.Time
	for done := 0; done < depth; {
		n := min(m.UBatch, depth-done)
		if _, err := m.Forward(r.tokens(n), done, false); err != nil {
			return fmt.Errorf("filling depth %d: %w", depth, err)
		}
		done += n
		// A deep fill of a large model takes a while; say how far it is,
		// at most ten times a second.
		if time.Since(last) >= 100*time.Millisecond || done == depth {
			last = time.Now()
			fmt.Fprintf(r.c.Log, "\rfilling depth %d: %d/%d tokens", depth, done, depth)
		}
	}
	fmt.Fprintln(r.c.Log)
	return nil
}

// measure runs t's warm-up and timed repetitions into res.
func (r *runner) measure(m *model.Model, t Test, res *Result) error {
	r.done++
	step := func(format string, a ...any) {
		if r.c.Progress {
			fmt.Fprintf(r.c.Log, "infer bench: benchmark %d/%d: %s\n", r.done, r.total, fmt.Sprintf(format, a...))
		}
	}
	step("starting %s", t.Name())
	res.Prompt, res.Gen, res.Depth, res.Test = t.Prompt, t.Gen, t.Depth, t.Name()
	res.Time = time.Now().UTC().Format(time.RFC3339)

	// The warm-up is llama-bench's (the whole prompt pass, then one
	// token), then one whole repetition, untimed. The first pass of each
	// batch size records that size's program, which must not be timed; the
	// device sits idle while it is recorded, and a repetition right after
	// that runs slower than the ones that follow it (docs/BENCHMARKS.md,
	// Method).
	if t.Prompt > 0 {
		step("warmup prompt run")
		if _, err := m.Forward(r.tokens(t.Prompt), t.Depth, false); err != nil {
			return err
		}
	}
	if t.Gen > 0 {
		step("warmup generation run")
		if _, err := m.Forward(r.tokens(1), t.Depth, false); err != nil {
			return err
		}
	}
	step("warmup repetition")
	if err := r.pass(m, t, r.tokens(t.Prompt+t.Gen)); err != nil {
		return err
	}

	samples := make([]time.Duration, 0, r.c.Reps)
	for rep := range r.c.Reps {
		step("run %d/%d", rep+1, r.c.Reps)
		ids := r.tokens(t.Prompt + t.Gen)
		start := time.Now()
		if err := r.pass(m, t, ids); err != nil {
			return err
		}
		samples = append(samples, time.Since(start))
	}
	res.setSamples(samples)
	return nil
}

// pass runs one repetition of t with the token ids ids: the prompt at the
// test's depth, then the generated tokens one by one after it. Forward
// returns only once the device has finished and the logits are on the
// host, so each generated token is synchronised, as llama-bench's
// llama_synchronize after every token.
func (r *runner) pass(m *model.Model, t Test, ids []int32) error {
	if t.Prompt > 0 {
		if _, err := m.Forward(ids[:t.Prompt], t.Depth, false); err != nil {
			return err
		}
	}
	for i := range t.Gen {
		pos := t.Depth + t.Prompt + i
		if _, err := m.Forward(ids[t.Prompt+i:t.Prompt+i+1], pos, false); err != nil {
			return err
		}
	}
	return nil
}

// tokens returns n random token ids, valid until the next call. The ids are
// drawn before the clock starts.
func (r *runner) tokens(n int) []int32 {
	r.ids = slices.Grow(r.ids[:0], n)[:n]
	for i := range r.ids {
		r.ids[i] = r.rng.Int32N(int32(r.vocab))
	}
	return r.ids
}

func (r *runner) logf(format string, a ...any) {
	if r.c.Progress {
		fmt.Fprintf(r.c.Log, "infer bench: "+format+"\n", a...)
	}
}

func waveName(w int) string {
	if w == 0 {
		return "auto"
	}
	return fmt.Sprint(w)
}
