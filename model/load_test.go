package model_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/vkinfer/vkinfer/backend/cpu"
	"github.com/vkinfer/vkinfer/gguf"
	"github.com/vkinfer/vkinfer/internal/fixtures"
	"github.com/vkinfer/vkinfer/internal/tinymodel"
	"github.com/vkinfer/vkinfer/model"
	"github.com/vkinfer/vkinfer/quant"
)

// TestLoadErrors checks that a file the GGUF reader accepts but the model
// cannot use fails Load with a one-line error naming the problem.
func TestLoadErrors(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(m *tinymodel.Model)
		want   string
	}{
		{"unsupported architecture", func(m *tinymodel.Model) { m.Set("general.architecture", "gptx") }, `unsupported architecture "gptx"`},
		{"another mixture of experts", func(m *tinymodel.Model) { m.Set("general.architecture", "qwen2moe") },
			`unsupported architecture "qwen2moe" (supported: gemma3, llama, mistral, phi3, qwen2, qwen3, qwen3moe)`},
		{"value head dim", func(m *tinymodel.Model) { m.Set("llama.attention.value_length", uint32(2)) }, "value head dim 2 differs"},
		{"logit softcapping", func(m *tinymodel.Model) { m.Set("llama.final_logit_softcapping", float32(30)) }, "final_logit_softcapping is not supported"},
		{"tensor the architecture does not use", func(m *tinymodel.Model) {
			extra := *m.Tensor("blk.0.attn_norm.weight")
			extra.Name = "blk.0.post_attention_norm.weight"
			m.Tensors = append(m.Tensors, extra)
		}, `"blk.0.post_attention_norm.weight" is not used by the llama architecture`},
		{"fused qkv of the wrong height", func(m *tinymodel.Model) {
			qkv := *m.Tensor("blk.0.attn_q.weight")
			qkv.Name = "blk.0.attn_qkv.weight"
			m.Tensors = append(m.Tensors, qkv)
		}, `"blk.0.attn_qkv.weight" has shape [8 8], want [8 16]`},
		{"missing architecture", func(m *tinymodel.Model) { m.Delete("general.architecture") }, "general.architecture is missing"},
		{"missing block count", func(m *tinymodel.Model) { m.Delete("llama.block_count") }, "llama.block_count"},
		{"missing rms eps", func(m *tinymodel.Model) { m.Delete("llama.attention.layer_norm_rms_epsilon") }, "layer_norm_rms_epsilon"},
		{"heads not a multiple of kv heads", func(m *tinymodel.Model) { m.Set("llama.attention.head_count_kv", uint32(3)) }, "multiple of 3 KV heads"},
		{"missing tensor", func(m *tinymodel.Model) { m.DropTensor("blk.0.ffn_up.weight") }, `"blk.0.ffn_up.weight" is missing`},
		{"shape disagrees", func(m *tinymodel.Model) { m.Set("llama.feed_forward_length", uint32(32)) }, `"blk.0.ffn_gate.weight" has shape [8 16], want [8 32]`},
		{"unsupported tensor type", func(m *tinymodel.Model) {
			w := m.Tensor("blk.0.attn_q.weight")
			w.Type, w.Shape = quant.Q2_K, []uint64{256, 1}
			w.Data = func() ([]byte, error) { return make([]byte, quant.Q2_K.BlockBytes()), nil }
		}, `"blk.0.attn_q.weight"`},
		{"missing vocabulary", func(m *tinymodel.Model) { m.Delete("tokenizer.ggml.tokens") }, "tokenizer"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tm := tinymodel.New()
			c.mutate(tm)
			f, err := gguf.Open(tm.Write(t))
			if err != nil {
				t.Fatalf("the reader rejected a file meant for the model to reject: %v", err)
			}
			defer f.Close()
			_, err = model.Load(f, cpu.New(1), model.Options{})
			if err == nil {
				t.Fatal("Load accepted a broken model")
			}
			if !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %q, want one line containing %q", err, c.want)
			}
		})
	}
}

// TestPromptBatchingMatchesWhole checks that evaluating a prompt in ubatches,
// and then token by token, gives the logits of one whole pass.
func TestPromptBatchingMatchesWhole(t *testing.T) {
	f, err := gguf.Open(tinymodel.New().Write(t))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	load := func(ub int) *model.Model {
		m, err := model.Load(f, cpu.New(2), model.Options{UBatch: ub})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	toks := []int32{1, 262, 263, 100, 101, 261, 50, 51, 52}
	whole := load(0)
	defer whole.Close()
	want, err := whole.Forward(toks, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	want = append([]float32(nil), want...)
	V := whole.HP.Vocab
	for _, ub := range []int{1, 2, 4} {
		m := load(ub)
		got, err := m.Forward(toks, 0, true)
		if err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if d := got[i] - want[i]; d > 1e-5 || d < -1e-5 {
				t.Fatalf("ubatch %d: logit %d of row %d differs: %v vs %v", ub, i%V, i/V, got[i], want[i])
			}
		}
		// Last-row logits from incremental decoding equal the whole pass's last row.
		if _, err := m.Forward(toks[:5], 0, false); err != nil {
			t.Fatal(err)
		}
		var last []float32
		for i := 5; i < len(toks); i++ {
			if last, err = m.Forward(toks[i:i+1], i, false); err != nil {
				t.Fatal(err)
			}
		}
		for j := range V {
			if d := last[j] - want[(len(toks)-1)*V+j]; d > 1e-5 || d < -1e-5 {
				t.Fatalf("ubatch %d: incremental logit %d differs by %v", ub, j, d)
			}
		}
		m.Close()
	}
	if _, err := whole.Forward(toks, tinymodel.Context-len(toks)+1, false); err == nil || !strings.Contains(err.Error(), "exceed the context") {
		t.Fatalf("context overflow not reported: %v", err)
	}
}

// asArch renames the tiny llama model's keys for architecture arch.
func asArch(m *tinymodel.Model, arch string) {
	for i := range m.KV {
		if k, ok := strings.CutPrefix(m.KV[i].Key, "llama."); ok {
			m.KV[i].Key = arch + "." + k
		}
	}
	m.Set("general.architecture", arch)
}

// TestSlidingWindowLayers checks the per-layer windows and RoPE bases read
// as llama.cpp lays them out: Gemma 3's pattern (every p-th layer global,
// 6 by default, 0 making all local), none without a window, and none for
// Phi-3, whose windows llama.cpp ignores.
func TestSlidingWindowLayers(t *testing.T) {
	cases := []struct {
		arch    string
		set     map[string]any
		windows []int
	}{
		{"gemma3", map[string]any{"gemma3.attention.sliding_window": uint32(8)}, []int{8, 8, 8, 8, 8, 0, 8}},
		{"gemma3", map[string]any{"gemma3.attention.sliding_window": uint32(5), "gemma3.attention.sliding_window_pattern": uint32(3)}, []int{5, 5, 0, 5, 5, 0, 5}},
		{"gemma3", map[string]any{"gemma3.attention.sliding_window": uint32(4), "gemma3.attention.sliding_window_pattern": uint32(0)}, []int{4, 4, 4, 4, 4, 4, 4}},
		{"gemma3", nil, nil},
		{"phi3", map[string]any{"phi3.attention.sliding_window": uint32(2047)}, nil},
	}
	for _, c := range cases {
		tm := tinymodel.New()
		asArch(tm, c.arch)
		tm.Set(c.arch+".block_count", uint32(7))
		tm.Set(c.arch+".rope.freq_base", float32(1e6))
		tm.Set(c.arch+".rope.freq_base_swa", float32(1e4))
		for k, v := range c.set {
			tm.Set(k, v)
		}
		f, err := gguf.Open(tm.Write(t))
		if err != nil {
			t.Fatal(err)
		}
		hp, err := model.ReadHParams(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(hp.Windows, c.windows) {
			t.Errorf("%s %v: windows %v, want %v", c.arch, c.set, hp.Windows, c.windows)
		}
		for l := range 7 {
			base, scale := hp.Rope(l)
			want := float32(1e6)
			if hp.Window(l) > 0 {
				want = 1e4
			}
			if base != want || scale != 1 {
				t.Errorf("%s %v: layer %d rope base %g scale %g, want %g and 1", c.arch, c.set, l, base, scale, want)
			}
		}
	}
}

// TestRingCacheMatchesWhole runs tiny-gemma3 (window 8 on 5 of its 6
// layers) in ubatches small enough that its sliding layers keep rings of
// Window+UBatch-1 slots, which wrap many times over the prompt, and checks
// every row's logits against one pass over a full cache; then decodes
// token by token past the prompt and checks the last row again.
func TestRingCacheMatchesWhole(t *testing.T) {
	f, err := gguf.Open(fixtures.Path(t, "arch", "tiny-gemma3.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	toks := make([]int32, 40)
	for i := range toks {
		toks[i] = int32(3 + (i*37)%500)
	}
	whole, err := model.Load(f, cpu.New(2), model.Options{Context: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer whole.Close()
	if s := whole.Cache.Slots(0); s != 64 {
		t.Fatalf("a 512-token ubatch: layer 0 keeps %d slots, want the whole context", s)
	}
	want, err := whole.Forward(toks, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	want = slices.Clone(want)
	V := whole.HP.Vocab
	for _, ub := range []int{1, 3, 16} {
		m, err := model.Load(f, cpu.New(2), model.Options{Context: 64, UBatch: ub})
		if err != nil {
			t.Fatal(err)
		}
		if s := m.Cache.Slots(0); s != 8+ub-1 || m.Cache.Slots(5) != 64 {
			t.Fatalf("ubatch %d: layers 0 and 5 keep %d and %d slots, want %d and 64", ub, s, m.Cache.Slots(5), 8+ub-1)
		}
		got, err := m.Forward(toks, 0, true)
		if err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if d := got[i] - want[i]; d > 1e-4 || d < -1e-4 {
				t.Fatalf("ubatch %d: logit %d of row %d differs: %v vs %v", ub, i%V, i/V, got[i], want[i])
			}
		}
		// Decoding one token at a time from position 30 rewrites the ring
		// slot by slot; the last row must not change.
		if _, err := m.Forward(toks[:30], 0, false); err != nil {
			t.Fatal(err)
		}
		var last []float32
		for i := 30; i < len(toks); i++ {
			if last, err = m.Forward(toks[i:i+1], i, false); err != nil {
				t.Fatal(err)
			}
		}
		for j := range V {
			if d := last[j] - want[(len(toks)-1)*V+j]; d > 1e-4 || d < -1e-4 {
				t.Fatalf("ubatch %d: decoded logit %d differs by %v", ub, j, d)
			}
		}
		m.Close()
	}
}
