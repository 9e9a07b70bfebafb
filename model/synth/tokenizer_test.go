package synth_test

import (
	"slices"
	"testing"

	"github.com/vkinfer/vkinfer/model/synth"
	"github.com/vkinfer/vkinfer/model/tokenizer"
)

// TestTokenizers builds our tokenizer from every preset's header (no
// weights are made): text round-trips through it, BOS is added where the
// family adds it, and the family's end-of-turn token, at its real id,
// parses from its text and ends generation.
func TestTokenizers(t *testing.T) {
	const text = "hello world, Synthetic tokens: 42 ü!\n\tÆsir"
	cases := []struct {
		preset string
		model  string // tokenizer.ggml.model
		bos    int32  // -1: none added
		prefix string // what decoding puts before the text (SentencePiece's "▁")
		eot    string // the end of a chat turn
		eotID  int32
	}{
		{"tiny", "llama", 1, " ", "</s>", 2},
		{"tiny-qwen2", "llama", 1, " ", "</s>", 2},
		{"tiny-qwen3", "gpt2", -1, "", "<|im_end|>", 990 + 2},
		{"tiny-gemma3", "llama", 2, "", "<end_of_turn>", 106},
		{"tiny-phi3", "llama", 1, " ", "<|end|>", 3 + 1000 + 7},
		{"tiny-llama3.2", "gpt2", 768, "", "<|eot_id|>", 768 + 9},
		{"tiny-qwen3moe", "gpt2", -1, "", "<|im_end|>", 990 + 2},
		{"llama3-8b", "llama", 1, " ", "</s>", 2},
		{"llama2-7b", "llama", 1, " ", "</s>", 2},
		{"qwen2.5-0.5b", "llama", 1, " ", "</s>", 2},
		{"qwen3-0.6b", "gpt2", -1, "", "<|im_end|>", 151645},
		{"qwen3-8b", "gpt2", -1, "", "<|im_end|>", 151645},
		{"gemma3-1b", "llama", 2, "", "<end_of_turn>", 106},
		{"gemma3-4b", "llama", 2, "", "<end_of_turn>", 106},
		{"phi3-mini", "llama", 1, " ", "<|end|>", 32007},
		{"llama3.2-1b", "gpt2", 128000, "", "<|eot_id|>", 128009},
		{"qwen3-30b-a3b", "gpt2", -1, "", "<|im_end|>", 151645},
	}
	if len(cases) != len(synth.Presets()) {
		t.Fatalf("test covers %d presets, the table has %d", len(cases), len(synth.Presets()))
	}
	for _, c := range cases {
		t.Run(c.preset, func(t *testing.T) {
			h, err := synth.Header("synth:" + c.preset)
			if err != nil {
				t.Fatal(err)
			}
			tok, err := tokenizer.FromGGUF(h)
			if err != nil {
				t.Fatal(err)
			}
			if tok.Model() != c.model {
				t.Errorf("tokenizer %s, want %s", tok.Model(), c.model)
			}
			ids := tok.Encode(text, true, false)
			if (c.bos >= 0) != (ids[0] == c.bos) || c.bos < 0 && ids[0] == tok.BOS() {
				t.Errorf("first token %d, want BOS %d (-1: none)", ids[0], c.bos)
			}
			dec := tok.NewDecoder()
			var got string
			for _, id := range ids {
				got += dec.Add(id)
			}
			if got += dec.Flush(); got != c.prefix+text {
				t.Errorf("round trip %q, want %q", got, c.prefix+text)
			}
			if got := tok.Encode(c.eot, false, true); !slices.Equal(got, []int32{c.eotID}) || !tok.IsEOG(c.eotID) {
				t.Errorf("%s parses to %v (want [%d]), end of generation %v", c.eot, got, c.eotID, tok.IsEOG(c.eotID))
			}
		})
	}
}
