package synth

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/vkinfer/vkinfer/gguf"
	"github.com/vkinfer/vkinfer/quant"
)

func write(t *testing.T, preset, ftype string, seed uint64) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), preset+"-"+ftype+".gguf")
	if err := Write(path, preset, ftype, seed, nil); err != nil {
		t.Fatal(err)
	}
	return path
}

func open(t *testing.T, path string) *gguf.File {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// Both tiny presets in every mix: the file reopens with the metadata
// llama.cpp needs, the planned tensors, and values that dequantize to
// finite numbers with about the intended mean and spread.
func TestWriteReopen(t *testing.T) {
	for _, name := range tinyPresets {
		for _, ft := range Ftypes() {
			t.Run(name+"/"+ft, func(t *testing.T) {
				p, _ := lookupPreset(name)
				mixInfo, _ := lookupFtype(ft)
				f := open(t, write(t, name, ft, 7))
				checkMetadata(t, f, p, mixInfo)
				checkTensors(t, f, p, mixInfo)
			})
		}
	}
}

// tinyPresets are the presets small enough to write in every test run.
var tinyPresets = []string{"tiny", "tiny-qwen2", "tiny-qwen3", "tiny-gemma3", "tiny-phi3", "tiny-llama3.2", "tiny-qwen3moe"}

func checkMetadata(t *testing.T, f *gguf.File, p *preset, m *ftype) {
	t.Helper()
	if f.Arch() != p.arch {
		t.Errorf("architecture %q, want %q", f.Arch(), p.arch)
	}
	a := p.arch + "."
	k := p.tokenizer
	uints := map[string]uint64{
		"general.file_type":           uint64(m.fileType),
		a + "context_length":          uint64(p.ctx),
		a + "embedding_length":        p.nEmbd,
		a + "block_count":             uint64(p.nLayer),
		a + "feed_forward_length":     p.nFF,
		a + "attention.head_count":    p.nHead,
		a + "attention.head_count_kv": p.nKV,
		"tokenizer.ggml.bos_token_id": uint64(k.id(k.bos, p.textTokens())),
		"tokenizer.ggml.eos_token_id": uint64(k.id(k.eos, p.textTokens())),
	}
	for k, want := range uints {
		if got, ok := f.Uint(k); !ok || got != want {
			t.Errorf("%s = %d (present %v), want %d", k, got, ok, want)
		}
	}
	floats := map[string]float64{
		a + "attention.layer_norm_rms_epsilon": float64(p.eps),
		a + "rope.freq_base":                   float64(p.ropeBase),
	}
	for k, want := range floats {
		if got, ok := f.Float(k); !ok || got != want {
			t.Errorf("%s = %g (present %v), want %g", k, got, ok, want)
		}
	}
	if s, _ := f.String("tokenizer.ggml.model"); s != k.model {
		t.Errorf("tokenizer.ggml.model %q, want %q", s, k.model)
	}
	if b, ok := f.Bool("tokenizer.ggml.add_bos_token"); !ok || b != k.addBOS {
		t.Errorf("add_bos_token %v (present %v)", b, ok)
	}
	tokens, _ := f.Strings("tokenizer.ggml.tokens")
	types, _ := f.Int32s("tokenizer.ggml.token_type")
	if len(tokens) != p.nVocab || len(types) != p.nVocab {
		t.Errorf("vocabulary: %d tokens, %d types, want %d", len(tokens), len(types), p.nVocab)
	}
	scores, hasScores := f.Float32s("tokenizer.ggml.scores")
	merges, hasMerges := f.Strings("tokenizer.ggml.merges")
	switch {
	case k.model == modelSPM && (len(scores) != p.nVocab || hasMerges):
		t.Errorf("SentencePiece vocabulary with %d scores, merges %v", len(scores), hasMerges)
	case k.model == modelBPE && (len(merges) != p.textTokens()-256 || hasScores):
		t.Errorf("BPE vocabulary with %d merges, scores %v", len(merges), hasScores)
	}
}

func checkTensors(t *testing.T, f *gguf.File, p *preset, m *ftype) {
	t.Helper()
	specs := p.tensors()
	got := f.Tensors()
	if len(got) != len(specs) {
		t.Fatalf("%d tensors, want %d", len(got), len(specs))
	}
	for i, spec := range specs {
		ft := got[i]
		want := m.typeOf(spec, p.nLayer, p.tied)
		if ft.Name != spec.name || ft.Type != want || !slices.Equal(ft.Shape, spec.shape) {
			t.Errorf("tensor %d: %s %s %v, want %s %s %v", i, ft.Name, ft.Type, ft.Shape, spec.name, want, spec.shape)
			continue
		}
		vals := make([]float32, ft.Elements())
		if err := quant.Dequantize(ft.Type, f.Data(ft), vals); err != nil {
			t.Fatalf("%s: %v", ft.Name, err)
		}
		if spec.values != nil {
			if !slices.Equal(vals, spec.values) {
				t.Errorf("%s: %v, want %v", ft.Name, vals, spec.values)
			}
			continue
		}
		checkStats(t, ft.Name+" ("+ft.Type.String()+")", vals, distOf(spec), ft.Type.BlockSize())
	}
}

// checkStats wants every value finite, and the mean and standard deviation
// near the intended ones, within what sampling allows: each independently
// scaled block (or, for plain floats, each value) moves the deviation by
// about 0.45/sqrt(count) relative, and the mean moves by std/sqrt(values).
// TestDistributions holds the generators to tighter bounds on large tensors.
func checkStats(t *testing.T, what string, vals []float32, d dist, blockSize int) {
	t.Helper()
	mean, std, err := stats(vals)
	if err != nil {
		t.Errorf("%s: %v", what, err)
		return
	}
	n := float64(len(vals))
	stdTol := 0.01 + 4*0.45/math.Sqrt(n/float64(blockSize))
	meanTol := (0.01 + 4/math.Sqrt(n)) * d.std
	if math.Abs(std/d.std-1) > stdTol || math.Abs(mean-d.mean) > meanTol {
		t.Errorf("%s: mean %.4g std %.4g, want %.4g ± %.2g and %.4g ± %.0f%%", what, mean, std, d.mean, meanTol, d.std, 100*stdTol)
	}
}

// stats returns the mean and standard deviation of vals, or an error
// naming the first value that is not finite.
func stats(vals []float32) (mean, std float64, err error) {
	var sum, sq float64
	for i, v := range vals {
		x := float64(v)
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return 0, 0, fmt.Errorf("value %d is %g", i, x)
		}
		sum += x
		sq += x * x
	}
	n := float64(len(vals))
	mean = sum / n
	return mean, math.Sqrt(sq/n - mean*mean), nil
}

// The bytes depend on the seed alone: not on the number of cores, which
// only changes how the chunks are shared out.
func TestDeterministic(t *testing.T) {
	a, err := os.ReadFile(write(t, "tiny", "q4_k_m", 1))
	if err != nil {
		t.Fatal(err)
	}
	prev := runtime.GOMAXPROCS(1)
	b, err := os.ReadFile(write(t, "tiny", "q4_k_m", 1))
	runtime.GOMAXPROCS(prev)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Error("same seed, different files")
	}

	// Another seed changes every tensor.
	f1, f2 := open(t, write(t, "tiny", "q4_k_m", 1)), open(t, write(t, "tiny", "q4_k_m", 2))
	t2 := f2.Tensors()
	for i, t1 := range f1.Tensors() {
		if bytes.Equal(f1.Data(t1), f2.Data(t2[i])) {
			t.Errorf("%s: same bytes for seeds 1 and 2", t1.Name)
		}
	}
}

// Tensors large enough to span several chunks get one stream per chunk:
// no two chunks may repeat each other.
func TestChunksDiffer(t *testing.T) {
	spec := tensorSpec{name: "m", kind: kindMatrix, layer: 0, shape: []uint64{1024, 1024}}
	b, err := tensorData(spec, quant.Q8_0, 0, func(uint64) {})
	if err != nil {
		t.Fatal(err)
	}
	chunk := chunkValues / quant.Q8_0.BlockSize() * quant.Q8_0.BlockBytes()
	if len(b) != 4*chunk {
		t.Fatalf("%d bytes, want 4 chunks of %d", len(b), chunk)
	}
	for i := 1; i < 4; i++ {
		if bytes.Equal(b[:chunk], b[i*chunk:(i+1)*chunk]) {
			t.Errorf("chunk %d repeats chunk 0", i)
		}
	}
}

func TestProgress(t *testing.T) {
	var last, total uint64
	calls := 0
	path := filepath.Join(t.TempDir(), "p.gguf")
	err := Write(path, "tiny", "f16", 0, func(done, tot uint64) {
		if done < last || (total != 0 && tot != total) {
			t.Errorf("progress went from %d/%d to %d/%d", last, total, done, tot)
		}
		last, total = done, tot
		calls++
	})
	if err != nil {
		t.Fatal(err)
	}
	var sum uint64
	for _, ts := range open(t, path).Tensors() {
		sum += ts.Bytes
	}
	if calls < 2 || last != total || total != sum {
		t.Errorf("%d calls, last %d/%d, want the tensor bytes %d", calls, last, total, sum)
	}
}

// A failed write leaves nothing behind: not the target, not the temporary.
func TestWriteErrors(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "taken")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path, preset, ftype, want string
	}{
		{filepath.Join(dir, "a.gguf"), "huge", "q4_k_m", "unknown preset"},
		{filepath.Join(dir, "b.gguf"), "tiny", "q2_k", "unknown ftype"},
		{filepath.Join(dir, "missing", "c.gguf"), "tiny", "q8_0", "no such file"},
		{target, "tiny", "q8_0", "taken"}, // the rename onto a directory fails
		{"", "tiny", "q8_0", "no output path"},
	} {
		err := Write(c.path, c.preset, c.ftype, 0, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("Write(%q, %q, %q): %v, want a one-line error mentioning %q", c.path, c.preset, c.ftype, err, c.want)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "taken" {
		t.Errorf("left behind: %v", entries)
	}
}

func TestResolve(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	dir := filepath.Join(cache, "vkinfer", "synth")

	if got, err := Resolve("models/x.gguf", nil); err != nil || got != "models/x.gguf" {
		t.Errorf("a plain path: %q, %v", got, err)
	}

	path, err := Resolve("synth:tiny", nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "tiny-q4_k_m-seed0.gguf"); path != want {
		t.Errorf("path %s, want %s", path, want)
	}
	first, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	cached, _ := os.ReadFile(path)
	fresh, _ := os.ReadFile(write(t, "tiny", "q4_k_m", 0))
	if !bytes.Equal(cached, fresh) {
		t.Error("the cached file differs from Write with seed 0")
	}

	// The second call reuses the file: a rewrite would rename a new inode in.
	again, err := Resolve("synth:tiny:q4_k_m", nil)
	if err != nil || again != path {
		t.Fatalf("second call: %q, %v", again, err)
	}
	second, _ := os.Stat(again)
	if !os.SameFile(first, second) || !second.ModTime().Equal(first.ModTime()) {
		t.Error("the second call rewrote the file")
	}

	if p, err := Resolve("synth:tiny-qwen2:f16", nil); err != nil || p != filepath.Join(dir, "tiny-qwen2-f16-seed0.gguf") {
		t.Errorf("synth:tiny-qwen2:f16: %q, %v", p, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("cache holds %d entries, want the 2 models (no temporaries)", len(entries))
	}

	for spec, want := range map[string][]string{
		"synth:":               {"unknown preset", "tiny", "llama3-8b", "qwen2.5-0.5b"},
		"synth:gpt5":           {"unknown preset", `"gpt5"`, "llama2-7b"},
		"synth:tiny:q4_0":      {"unknown ftype", `"q4_0"`, "q4_k_m", "q8_0", "f16"},
		"synth:tiny:q8_0:more": {"unknown ftype", `"q8_0:more"`},
	} {
		_, err := Resolve(spec, nil)
		for _, w := range want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("Resolve(%q): %v, want an error mentioning %s", spec, err, w)
			}
		}
	}
}

// TestHeader: a preset's header is the header of the file Resolve writes
// (every key's value, the tensor table, the size), and it is made without
// writing anything.
func TestHeader(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	for _, spec := range []string{"synth:tiny", "synth:tiny-qwen2:q8_0", "synth:tiny:f16"} {
		h, err := Header(spec)
		if err != nil {
			t.Fatal(err)
		}
		path, err := Resolve(spec, nil)
		if err != nil {
			t.Fatal(err)
		}
		f := open(t, path)
		if h.Path() != spec || h.Size() != f.Size() || !slices.Equal(h.Keys(), f.Keys()) {
			t.Errorf("%s: path %q, size %d, keys %v; want the spec, %d, %v", spec, h.Path(), h.Size(), h.Keys(), f.Size(), f.Keys())
		}
		for _, k := range f.Keys() {
			if got, want := metaValue(h, k), metaValue(f, k); got != want {
				t.Errorf("%s: %s = %s, want %s", spec, k, got, want)
			}
		}
		want := f.Tensors()
		for i, got := range h.Tensors() {
			if i >= len(want) || fmt.Sprint(*got) != fmt.Sprint(*want[i]) {
				t.Errorf("%s: tensor %d is %+v, want the file's", spec, i, *got)
			}
		}
		if len(h.Tensors()) != len(want) {
			t.Errorf("%s: %d tensors, want %d", spec, len(h.Tensors()), len(want))
		}
	}
	// The real geometries come without their gigabytes.
	dir := filepath.Join(os.Getenv("XDG_CACHE_HOME"), "vkinfer", "synth")
	before, _ := os.ReadDir(dir)
	h, err := Header("synth:llama3-8b")
	if err != nil {
		t.Fatal(err)
	}
	if out, ok := h.Tensor("output.weight"); !ok || out.Type != quant.Q6_K || h.Size() < 4<<30 {
		t.Errorf("llama3-8b: output %+v, size %d", out, h.Size())
	}
	if after, _ := os.ReadDir(dir); len(after) != len(before) {
		t.Errorf("Header wrote into the cache: %d entries, then %d", len(before), len(after))
	}
	for spec, want := range map[string]string{"tiny": "names no preset", "synth:gpt5": "unknown preset", "synth:tiny:q4_0": "unknown ftype"} {
		if _, err := Header(spec); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Header(%q): %v, want an error mentioning %s", spec, err, want)
		}
	}
}

// metaValue renders a metadata value by whichever getter reads it.
func metaValue(f *gguf.File, key string) string {
	if v, ok := f.String(key); ok {
		return "string " + v
	}
	if v, ok := f.Strings(key); ok {
		return fmt.Sprint("strings ", v)
	}
	if v, ok := f.Float32s(key); ok {
		return fmt.Sprint("float32s ", v)
	}
	if v, ok := f.Int32s(key); ok {
		return fmt.Sprint("int32s ", v)
	}
	if v, ok := f.Bool(key); ok {
		return fmt.Sprint("bool ", v)
	}
	if v, ok := f.Uint(key); ok {
		return fmt.Sprint("uint ", v)
	}
	if v, ok := f.Float(key); ok {
		return fmt.Sprint("float ", v)
	}
	return "?"
}

// TestPresetMetadata reads the headers of the real-geometry presets (no
// weights are made) for the keys convert_hf_to_gguf writes for each family,
// with the values of the checkpoints' configs and tokenizers written out by
// hand, and for the keys it does not write.
func TestPresetMetadata(t *testing.T) {
	for _, c := range []struct {
		spec   string
		want   map[string]string // key → metaValue
		absent []string
	}{
		{"synth:qwen3-0.6b", map[string]string{
			"general.architecture":            "string qwen3",
			"qwen3.context_length":            "uint 40960",
			"qwen3.embedding_length":          "uint 1024",
			"qwen3.block_count":               "uint 28",
			"qwen3.feed_forward_length":       "uint 3072",
			"qwen3.attention.head_count":      "uint 16",
			"qwen3.attention.head_count_kv":   "uint 8",
			"qwen3.attention.key_length":      "uint 128",
			"qwen3.attention.value_length":    "uint 128",
			"qwen3.rope.freq_base":            "float 1e+06",
			"tokenizer.ggml.model":            "string gpt2",
			"tokenizer.ggml.pre":              "string qwen2",
			"tokenizer.ggml.bos_token_id":     "uint 151643",
			"tokenizer.ggml.eos_token_id":     "uint 151645",
			"tokenizer.ggml.padding_token_id": "uint 151643",
			"tokenizer.ggml.add_bos_token":    "bool false",
			"general.file_type":               "uint 15",
			"general.quantization_version":    "uint 2",
		}, []string{"qwen3.rope.dimension_count", "qwen3.vocab_size", "tokenizer.ggml.scores", "tokenizer.ggml.unknown_token_id"}},
		{"synth:qwen3-8b:q8_0", map[string]string{
			"qwen3.embedding_length":        "uint 4096",
			"qwen3.block_count":             "uint 36",
			"qwen3.feed_forward_length":     "uint 12288",
			"qwen3.attention.head_count":    "uint 32",
			"qwen3.attention.head_count_kv": "uint 8",
			"general.file_type":             "uint 7",
		}, nil},
		{"synth:gemma3-1b", map[string]string{
			"gemma3.context_length":                   "uint 32768",
			"gemma3.embedding_length":                 "uint 1152",
			"gemma3.block_count":                      "uint 26",
			"gemma3.feed_forward_length":              "uint 6912",
			"gemma3.attention.head_count":             "uint 4",
			"gemma3.attention.head_count_kv":          "uint 1",
			"gemma3.attention.key_length":             "uint 256",
			"gemma3.attention.value_length":           "uint 256",
			"gemma3.attention.sliding_window":         "uint 512",
			"gemma3.attention.sliding_window_pattern": "uint 6",
			"gemma3.rope.freq_base":                   "float 1e+06",
			"gemma3.rope.freq_base_swa":               "float 10000",
			"tokenizer.ggml.model":                    "string llama",
			"tokenizer.ggml.bos_token_id":             "uint 2",
			"tokenizer.ggml.eos_token_id":             "uint 1",
			"tokenizer.ggml.unknown_token_id":         "uint 3",
			"tokenizer.ggml.padding_token_id":         "uint 0",
			"tokenizer.ggml.add_bos_token":            "bool true",
			"tokenizer.ggml.add_space_prefix":         "bool false",
		}, []string{"gemma3.rope.dimension_count", "gemma3.rope.scaling.type", "tokenizer.ggml.merges"}},
		{"synth:gemma3-4b", map[string]string{
			"gemma3.context_length":           "uint 131072",
			"gemma3.embedding_length":         "uint 2560",
			"gemma3.block_count":              "uint 34",
			"gemma3.feed_forward_length":      "uint 10240",
			"gemma3.attention.head_count":     "uint 8",
			"gemma3.attention.head_count_kv":  "uint 4",
			"gemma3.attention.sliding_window": "uint 1024",
			"gemma3.rope.scaling.type":        "string linear",
			"gemma3.rope.scaling.factor":      "float 8",
		}, nil},
		{"synth:phi3-mini", map[string]string{
			"phi3.context_length":                       "uint 4096",
			"phi3.rope.scaling.original_context_length": "uint 4096",
			"phi3.embedding_length":                     "uint 3072",
			"phi3.block_count":                          "uint 32",
			"phi3.feed_forward_length":                  "uint 8192",
			"phi3.attention.head_count":                 "uint 32",
			"phi3.attention.head_count_kv":              "uint 32",
			"phi3.rope.dimension_count":                 "uint 96",
			"phi3.rope.freq_base":                       "float 10000",
			"phi3.attention.sliding_window":             "uint 2047",
			"tokenizer.ggml.model":                      "string llama",
			"tokenizer.ggml.bos_token_id":               "uint 1",
			"tokenizer.ggml.eos_token_id":               "uint 32000",
			"tokenizer.ggml.padding_token_id":           "uint 32000",
		}, []string{"phi3.attention.key_length", "phi3.attention.sliding_window_pattern"}},
		{"synth:llama3.2-1b", map[string]string{
			"llama.vocab_size":              "uint 128256",
			"llama.context_length":          "uint 131072",
			"llama.embedding_length":        "uint 2048",
			"llama.block_count":             "uint 16",
			"llama.feed_forward_length":     "uint 8192",
			"llama.attention.head_count":    "uint 32",
			"llama.attention.head_count_kv": "uint 8",
			"llama.attention.key_length":    "uint 64",
			"llama.rope.dimension_count":    "uint 64",
			"llama.rope.freq_base":          "float 500000",
			"tokenizer.ggml.model":          "string gpt2",
			"tokenizer.ggml.pre":            "string llama-bpe",
			"tokenizer.ggml.bos_token_id":   "uint 128000",
			"tokenizer.ggml.eos_token_id":   "uint 128009",
			"tokenizer.ggml.add_bos_token":  "bool true",
		}, []string{"llama.rope.scaling.type"}},
		// Qwen3-30B-A3B's config: moe_intermediate_size 768 becomes
		// expert_feed_forward_length, intermediate_size 6144 (no tensor's)
		// feed_forward_length.
		{"synth:qwen3-30b-a3b", map[string]string{
			"general.architecture":                "string qwen3moe",
			"qwen3moe.context_length":             "uint 40960",
			"qwen3moe.embedding_length":           "uint 2048",
			"qwen3moe.block_count":                "uint 48",
			"qwen3moe.feed_forward_length":        "uint 6144",
			"qwen3moe.expert_feed_forward_length": "uint 768",
			"qwen3moe.expert_count":               "uint 128",
			"qwen3moe.expert_used_count":          "uint 8",
			"qwen3moe.attention.head_count":       "uint 32",
			"qwen3moe.attention.head_count_kv":    "uint 4",
			"qwen3moe.attention.key_length":       "uint 128",
			"qwen3moe.rope.freq_base":             "float 1e+06",
			"tokenizer.ggml.model":                "string gpt2",
			"tokenizer.ggml.eos_token_id":         "uint 151645",
			"general.file_type":                   "uint 15",
		}, []string{"qwen3moe.rope.dimension_count", "qwen3moe.expert_shared_feed_forward_length", "qwen3moe.vocab_size"}},
	} {
		h, err := Header(c.spec)
		if err != nil {
			t.Fatal(err)
		}
		for k, want := range c.want {
			if got := metaValue(h, k); got != want {
				t.Errorf("%s: %s = %s, want %s", c.spec, k, got, want)
			}
		}
		for _, k := range c.absent {
			if h.Has(k) {
				t.Errorf("%s: unexpected key %s = %s", c.spec, k, metaValue(h, k))
			}
		}
	}
}
