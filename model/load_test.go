package model_test

import (
	"strings"
	"testing"

	"github.com/vkinfer/vkinfer/backend/cpu"
	"github.com/vkinfer/vkinfer/gguf"
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
