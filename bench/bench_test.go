package bench

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vkinfer/vkinfer/backend"
	"github.com/vkinfer/vkinfer/backend/cpu"
	"github.com/vkinfer/vkinfer/gguf"
	"github.com/vkinfer/vkinfer/internal/fixtures"
	"github.com/vkinfer/vkinfer/model/synth"
)

// call is one program run the spy saw: batch size and start position.
type call struct{ n, pos int }

// spy is the CPU backend with every program run and cache size logged, so
// a test can check the method itself: what is filled, warmed up and timed,
// at which positions.
type spy struct {
	backend.Backend
	calls    *[]call
	contexts *[]int
}

func (s spy) InitCache(c backend.Cache) error {
	*s.contexts = append(*s.contexts, c.Context)
	return s.Backend.InitCache(c)
}

func (s spy) Record(n int, build func(backend.Ops)) (backend.Program, error) {
	p, err := s.Backend.Record(n, build)
	return spyProgram{p, s.calls}, err
}

type spyProgram struct {
	backend.Program
	calls *[]call
}

func (p spyProgram) Run(tokens []int32, pos int, out []float32) error {
	*p.calls = append(*p.calls, call{len(tokens), pos})
	return p.Program.Run(tokens, pos, out)
}

// TestMethod runs a small benchmark on the CPU backend and checks every
// forward pass against llama-bench's method: one load per fa value and
// depth, with the context that depth's tests need, fill each depth once in
// ubatch pieces, warm each test up (whole prompt, one
// token, then one untimed repetition), then per repetition the prompt at pos=depth and the tokens one by
// one after it.
func TestMethod(t *testing.T) {
	var calls []call
	var contexts []int
	var opens []string
	c := Defaults()
	c.Models = []string{fixtures.Path(t, "stories260K.gguf")}
	c.Prompt, c.Gen, c.PG = []int{4}, []int{2}, []PG{{3, 1}}
	c.Depth, c.UBatch, c.FlashAttn, c.Reps, c.Threads = []int{0, 8}, []int{4}, []int{0, 1}, 2, 1
	c.Open = func(in Instance) (backend.Backend, error) {
		opens = append(opens, fmt.Sprint(in.Wave, in.FlashAttn))
		return spy{cpu.New(1), &calls, &contexts}, nil
	}
	var got []Result
	if err := Run(c, func(r Result) error { got = append(got, r); return nil }); err != nil {
		t.Fatal(err)
	}

	rep := func(n int, cs ...call) (out []call) {
		for range n {
			out = append(out, cs...)
		}
		return out
	}
	var load []call
	for _, d := range []int{0, 8} {
		if d > 0 {
			load = append(load, call{4, 0}, call{4, 4}) // the fill, in ubatch pieces
		}
		// Each test: llama-bench's warm-up, then one untimed repetition and
		// the two timed ones.
		load = append(load, call{4, d})                            // pp4 warm-up
		load = append(load, rep(3, call{4, d})...)                 // pp4
		load = append(load, call{1, d})                            // tg2 warm-up
		load = append(load, rep(3, call{1, d}, call{1, d + 1})...) // tg2
		load = append(load, call{3, d}, call{1, d})                // pp3+tg1 warm-up
		load = append(load, rep(3, call{3, d}, call{1, d + 3})...) // pp3+tg1
	}
	if want := rep(2, load...); !slices.Equal(calls, want) {
		t.Errorf("forward passes (n, pos):\n got %v\nwant %v", calls, want)
	}
	if !slices.Equal(opens, []string{"0 false", "0 false", "0 true", "0 true"}) || !slices.Equal(contexts, []int{256, 256, 256, 256}) {
		t.Errorf("backends opened for (wave, flash) %q with KV contexts %v; want (0, false) twice (depths 0 and 8) then (0, true) twice, each at 256 (at most 12 positions, padded)", opens, contexts)
	}

	names := []string{"pp4", "tg2", "pp3+tg1", "pp4 @ d8", "tg2 @ d8", "pp3+tg1 @ d8"}
	if len(got) != 2*len(names) {
		t.Fatalf("%d results, want %d", len(got), 2*len(names))
	}
	for i, r := range got {
		if j := i % len(names); r.Test != names[j] || r.Depth != []int{0, 8}[j/3] || r.FlashAttn != i/len(names) {
			t.Errorf("result %d: test %q at depth %d fa %d, want %q fa %d", i, r.Test, r.Depth, r.FlashAttn, names[j], i/len(names))
		}
		if r.Backend != "CPU" || r.GPULayers != 0 || r.Threads != 1 || r.UBatch != 4 {
			t.Errorf("result %d: backend %q ngl %d threads %d ub %d", i, r.Backend, r.GPULayers, r.Threads, r.UBatch)
		}
		if r.ModelType != "llama" || r.ModelParams == 0 || r.ModelSize == 0 {
			t.Errorf("result %d: model %q, %d params, %d bytes", i, r.ModelType, r.ModelParams, r.ModelSize)
		}
		if _, err := time.Parse(time.RFC3339, r.Time); err != nil {
			t.Errorf("result %d: test_time: %v", i, err)
		}
		if len(r.SamplesNs) != 2 || len(r.SamplesTs) != 2 {
			t.Fatalf("result %d: %d and %d samples, want 2", i, len(r.SamplesNs), len(r.SamplesTs))
		}
		for j, ns := range r.SamplesNs {
			if want := 1e9 * float64(r.Prompt+r.Gen) / float64(ns); r.SamplesTs[j] != want {
				t.Errorf("result %d sample %d: %v t/s for %d ns, want %v", i, j, r.SamplesTs[j], ns, want)
			}
		}
	}
}

func TestSamples(t *testing.T) {
	r := Result{Prompt: 10}
	r.setSamples([]time.Duration{time.Second, 2 * time.Second})
	if !slices.Equal(r.SamplesNs, []uint64{1e9, 2e9}) || !slices.Equal(r.SamplesTs, []float64{10, 5}) {
		t.Fatalf("samples %v ns, %v t/s", r.SamplesNs, r.SamplesTs)
	}
	// Sample standard deviation of {10, 5}: sqrt(2·2.5²/1).
	if r.AvgTs != 7.5 || math.Abs(r.StddevTs-math.Sqrt(12.5)) > 1e-12 {
		t.Errorf("t/s %v ± %v, want 7.5 ± %v", r.AvgTs, r.StddevTs, math.Sqrt(12.5))
	}
	if r.AvgNs != 1.5e9 || r.StddevNs != 707106781 {
		t.Errorf("ns %d ± %d, want 1500000000 ± 707106781", r.AvgNs, r.StddevNs)
	}
	r = Result{Gen: 4}
	r.setSamples([]time.Duration{0, 500 * time.Millisecond})
	if r.SamplesNs[0] != 1 || r.StddevTs == 0 || math.IsInf(r.AvgTs, 0) {
		t.Errorf("a zero reading gave %v ns, %v ± %v t/s; want 1 ns and finite rates", r.SamplesNs, r.AvgTs, r.StddevTs)
	}
	r.setSamples([]time.Duration{time.Second})
	if r.AvgTs != 4 || r.StddevTs != 0 || r.StddevNs != 0 {
		t.Errorf("one sample: %v ± %v t/s, ±%d ns; want 4 ± 0", r.AvgTs, r.StddevTs, r.StddevNs)
	}
}

func TestTestName(t *testing.T) {
	for _, c := range []struct {
		t    Test
		want string
	}{
		{Test{Prompt: 512}, "pp512"},
		{Test{Gen: 128}, "tg128"},
		{Test{Prompt: 512, Depth: 8192}, "pp512 @ d8192"},
		{Test{Gen: 128, Depth: 16384}, "tg128 @ d16384"},
		{Test{Prompt: 512, Gen: 128}, "pp512+tg128"},
		{Test{Prompt: 512, Gen: 128, Depth: 4}, "pp512+tg128 @ d4"},
	} {
		if got := c.t.Name(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.t, got, c.want)
		}
	}
}

// TestContext sizes each depth's context as llama-bench does: the deepest
// test at that depth, padded to 256.
func TestContext(t *testing.T) {
	c := Defaults()
	if got := c.contextFor(0); got != 512 {
		t.Errorf("pp512/tg128 at d0: context %d, want 512", got)
	}
	if got := c.contextFor(8192); got != 8704 {
		t.Errorf("pp512/tg128 at d8192: context %d, want 8704", got)
	}
	c.PG = []PG{{512, 128}}
	if got := c.contextFor(16384); got != 17152 {
		t.Errorf("pp512+tg128 at d16384: context %d, want 17152 (17024 padded to 256)", got)
	}
	c.Prompt, c.Gen, c.PG = []int{16}, []int{8}, nil
	if got := c.contextFor(32); got != 256 {
		t.Errorf("pp16/tg8 at d32: context %d, want 256", got)
	}
}

func TestValidate(t *testing.T) {
	open := func(Instance) (backend.Backend, error) { return cpu.New(1), nil }
	for _, c := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.Models = nil }, "no model"},
		{func(c *Config) { c.Prompt = []int{512, -1} }, "-p -1"},
		{func(c *Config) { c.Gen = []int{-5} }, "-n -5"},
		{func(c *Config) { c.Depth = []int{-1} }, "-d -1"},
		{func(c *Config) { c.UBatch = []int{0} }, "-ub 0"},
		{func(c *Config) { c.FlashAttn = []int{2} }, "-fa 2"},
		{func(c *Config) { c.Waves = []int{48} }, "--wave 48: want 32, 64 or auto"},
		{func(c *Config) { c.Waves = nil }, "--wave: empty"},
		{func(c *Config) { c.CoopMat = []string{"auto", "maybe"} }, `--coopmat "maybe"`},
		{func(c *Config) { c.CoopMat = nil }, "--coopmat: empty"},
		{func(c *Config) { c.PG = []PG{{-1, 4}} }, "-pg -1,4"},
		{func(c *Config) { c.Reps = 0 }, "-r 0"},
		{func(c *Config) { c.Threads = -2 }, "-t -2"},
		{func(c *Config) { c.Prompt, c.Gen = []int{0}, []int{0} }, "nothing to measure"},
		{func(c *Config) { c.Open = nil }, "Open"},
	} {
		cfg := Defaults()
		cfg.Models, cfg.Open = []string{"m.gguf"}, open
		c.edit(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want one containing %q", err, c.want)
		}
	}
	cfg := Defaults()
	cfg.Models, cfg.Open, cfg.Prompt = []string{"m.gguf"}, open, []int{0}
	if err := cfg.Validate(); err != nil {
		t.Errorf("-p 0 with -n 128: %v", err)
	}
}

// TestRunBadModel checks that a missing model fails before any backend is
// opened.
func TestRunBadModel(t *testing.T) {
	c := Defaults()
	c.Models = []string{fixtures.Path(t, "stories260K.gguf"), filepath.Join(t.TempDir(), "nope.gguf")}
	opened := 0
	c.Open = func(Instance) (backend.Backend, error) { opened++; return cpu.New(1), nil }
	err := Run(c, func(Result) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "nope.gguf") || opened != 0 {
		t.Fatalf("error %v after %d backends opened; want the missing file named and none opened", err, opened)
	}
}

func TestModelType(t *testing.T) {
	for _, c := range []struct {
		params uint64
		want   string
	}{{8_030_261_248, "8B"}, {6_738_415_616, "7B"}, {494_032_768, "494M"}, {292_800, "293K"}} {
		if got := sizeLabel(c.params); got != c.want {
			t.Errorf("sizeLabel(%d) = %q, want %q", c.params, got, c.want)
		}
	}
	path := filepath.Join(t.TempDir(), "tiny.gguf")
	if err := synth.Write(path, "tiny", "q4_k_m", 0, nil); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var params uint64
	for _, t := range f.Tensors() {
		params += t.Elements()
	}
	if got, want := modelType(f, params), "llama "+sizeLabel(params)+" Q4_K - Medium"; got != want {
		t.Errorf("synthetic tiny q4_k_m: %q, want %q", got, want)
	}
	// stories260K has no general.file_type: its general.name describes it.
	s, err := gguf.Open(fixtures.Path(t, "stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := modelType(s, 0); got != "llama" {
		t.Errorf("stories260K: %q, want its general.name %q", got, "llama")
	}
}

// results are two made-up results of a run over two waves.
func results() []Result {
	r := Result{BuildCommit: "0123abcd", BuildTime: "2026-01-02T03:04:05Z", ModelFile: "synth:llama3-8b",
		ModelType: "llama 8B Q4_K - Medium", ModelSize: 4_920_000_000, ModelParams: 8_030_000_000,
		Backend: "Vulkan", Device: "NVIDIA H200", Driver: "NVIDIA", DriverInfo: "570.86", GPULayers: 99,
		UBatch: 512, FlashAttn: 1, Wave: 32, SubgroupSize: 32, Prompt: 512, Depth: 8192, Test: "pp512 @ d8192",
		Time: "2026-01-02T03:05:00Z"}
	r.setSamples([]time.Duration{50 * time.Millisecond, 52 * time.Millisecond})
	s := r
	s.Wave, s.Prompt, s.Gen, s.Test = 64, 0, 128, "tg128 @ d8192"
	s.setSamples([]time.Duration{700 * time.Millisecond, 720 * time.Millisecond})
	return []Result{r, s}
}

func write(t *testing.T, format string, c Config, rs []Result) string {
	t.Helper()
	var b bytes.Buffer
	w, err := NewWriter(&b, format, c)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// mdCells splits a markdown table row into its trimmed cells.
func mdCells(line string) []string {
	cells := strings.Split(strings.Trim(line, "|"), "|")
	for i := range cells {
		cells[i] = strings.TrimSpace(cells[i])
	}
	return cells
}

func TestMarkdown(t *testing.T) {
	c := Defaults()
	c.Waves = []int{32, 64}
	out := write(t, "md", c, results())
	lines := strings.Split(out, "\n")
	if len(lines) != 7 || lines[4] != "" || lines[5] != "build: 0123abcd (2026-01-02T03:04:05Z)" || lines[6] != "" {
		t.Fatalf("want header, rule, 2 rows, a blank line and the build footer:\n%s", out)
	}
	if got, want := mdCells(lines[0]), []string{"model", "size", "params", "backend", "ngl", "wave", "test", "t/s"}; !slices.Equal(got, want) {
		t.Errorf("columns %q, want %q", got, want)
	}
	if got := mdCells(lines[1]); got[0] != strings.Repeat("-", 30) || got[1] != strings.Repeat("-", 9)+":" {
		t.Errorf("rule %q: want left-aligned model, right-aligned size", lines[1])
	}
	want := [][]string{
		{"llama 8B Q4_K - Medium", "4.58 GiB", "8.03 B", "Vulkan", "99", "32", "pp512 @ d8192", "10043.08 ± 278.49"},
		{"llama 8B Q4_K - Medium", "4.58 GiB", "8.03 B", "Vulkan", "99", "64", "tg128 @ d8192", "180.32 ± 3.59"},
	}
	for i, w := range want {
		if got := mdCells(lines[2+i]); !slices.Equal(got, w) {
			t.Errorf("row %d: %q, want %q", i, got, w)
		}
	}

	// A --coopmat list gets a column of the setting each row ran with.
	c = Defaults()
	c.CoopMat = []string{"on", "off"}
	rs := results()
	rs[0].CoopMat, rs[1].CoopMat = "on", "off"
	lines = strings.Split(write(t, "md", c, rs), "\n")
	if got, want := mdCells(lines[0]), []string{"model", "size", "params", "backend", "ngl", "coopmat", "test", "t/s"}; !slices.Equal(got, want) {
		t.Errorf("columns %q, want %q", got, want)
	}
	if got := mdCells(lines[3]); got[5] != "off" {
		t.Errorf("row %q: want coopmat off", got)
	}

	// Defaults show no parameter columns; a CPU run shows threads, and a
	// single non-default value (-fa 0, -ub 256) is shown like llama-bench.
	rs = results()
	for i := range rs {
		rs[i].Backend, rs[i].GPULayers, rs[i].Threads, rs[i].FlashAttn, rs[i].UBatch = "CPU", 0, 16, 0, 256
	}
	c = Defaults()
	c.FlashAttn, c.UBatch = []int{0}, []int{256}
	lines = strings.Split(write(t, "md", c, rs), "\n")
	if got, want := mdCells(lines[0]), []string{"model", "size", "params", "backend", "ngl", "threads", "n_ubatch", "fa", "test", "t/s"}; !slices.Equal(got, want) {
		t.Errorf("CPU, -fa 0 -ub 256: columns %q, want %q", got, want)
	}
	if got := mdCells(lines[2]); !slices.Equal(got[5:8], []string{"16", "256", "0"}) {
		t.Errorf("CPU row %q: want threads 16, n_ubatch 256, fa 0", got)
	}
	if got := mdCells(strings.Split(write(t, "md", Defaults(), results()), "\n")[0]); len(got) != 7 {
		t.Errorf("defaults: columns %q, want model…ngl, test, t/s", got)
	}
}

// fields are the names every record carries, in order: llama-bench's where
// they mean the same, then ours.
var fields = []string{"build_commit", "build_time", "model_filename", "model_type", "model_size", "model_n_params",
	"backends", "device", "driver", "driver_info", "n_gpu_layers", "n_threads", "n_ubatch", "flash_attn", "wave",
	"coopmat", "subgroup_size", "tune_profile", "n_prompt", "n_gen", "n_depth", "test", "test_time", "avg_ns", "stddev_ns", "avg_ts",
	"stddev_ts", "samples_ns", "samples_ts"}

func TestCSV(t *testing.T) {
	rows, err := csv.NewReader(strings.NewReader(write(t, "csv", Defaults(), results()))).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 || !slices.Equal(rows[0], fields) {
		t.Fatalf("%d rows, header %q; want 3 rows and header %q", len(rows), rows[0], fields)
	}
	for i, r := range results() {
		rec := map[string]string{}
		for j, f := range fields {
			rec[f] = rows[1+i][j]
		}
		ns := strings.Split(rec["samples_ns"], ";")
		if rec["test"] != r.Test || rec["wave"] != fmt.Sprint(r.Wave) || rec["avg_ts"] != fmt.Sprint(r.AvgTs) ||
			rec["device"] != r.Device || len(ns) != 2 || ns[1] != fmt.Sprint(r.SamplesNs[1]) {
			t.Errorf("row %d: %v", i, rec)
		}
	}
}

func TestJSON(t *testing.T) {
	var got []Result
	out := write(t, "json", Defaults(), results())
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if !reflect.DeepEqual(got, results()) {
		t.Errorf("json round trip:\n got %+v\nwant %+v", got, results())
	}
	var keys []map[string]any
	json.Unmarshal([]byte(out), &keys)
	for k := range keys[0] {
		if !slices.Contains(fields, k) {
			t.Errorf("unexpected json field %q", k)
		}
	}
	if len(keys[0]) != len(fields) {
		t.Errorf("%d json fields, want %d", len(keys[0]), len(fields))
	}

	lines := strings.Split(strings.TrimSuffix(write(t, "jsonl", Defaults(), results()), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("jsonl: %d lines, want 2", len(lines))
	}
	for i, l := range lines {
		var r Result
		if err := json.Unmarshal([]byte(l), &r); err != nil || !reflect.DeepEqual(r, results()[i]) {
			t.Errorf("jsonl line %d: %v, %+v", i, err, r)
		}
	}
}

func TestWriterEdges(t *testing.T) {
	if _, err := NewWriter(&bytes.Buffer{}, "sql", Defaults()); err == nil || !strings.Contains(err.Error(), `-o "sql"`) {
		t.Errorf("-o sql: %v", err)
	}
	// A run that fails before its first result prints nothing at all.
	for _, f := range Formats {
		if out := write(t, f, Defaults(), nil); out != "" {
			t.Errorf("%s with no results: %q", f, out)
		}
	}
}
