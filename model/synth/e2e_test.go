package synth_test

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/vkinfer/vkinfer/backend/cpu"
	"github.com/vkinfer/vkinfer/gguf"
	"github.com/vkinfer/vkinfer/model"
	"github.com/vkinfer/vkinfer/model/synth"
)

// The tiny models load in the engine and a forward pass through every
// layer gives finite logits of about unit spread at every position: the
// weight scaling keeps activations in range. (TestTokenizers checks their
// vocabularies.)
func TestForward(t *testing.T) {
	const text = "hello world, Synthetic tokens: 42 ü!"
	for _, preset := range []string{"tiny", "tiny-qwen2", "tiny-qwen3", "tiny-gemma3", "tiny-phi3", "tiny-llama3.2", "tiny-qwen3moe"} {
		for _, ftype := range []string{"q4_k_m", "q8_0", "f16"} {
			t.Run(preset+"/"+ftype, func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "m.gguf")
				if err := synth.Write(path, preset, ftype, 5, nil); err != nil {
					t.Fatal(err)
				}
				f, err := gguf.Open(path)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				m, err := model.Load(f, cpu.New(2), model.Options{Context: 256})
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()

				ids := m.Tok.Encode(text, true, false)
				logits, err := m.Forward(ids, 0, true)
				if err != nil {
					t.Fatal(err)
				}
				vocab := m.HP.Vocab
				for pos := range len(ids) {
					row := logits[pos*vocab : (pos+1)*vocab]
					var sum, sq float64
					for _, v := range row {
						if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
							t.Fatalf("position %d: logit %g", pos, v)
						}
						sum += float64(v)
						sq += float64(v) * float64(v)
					}
					mean := sum / float64(vocab)
					if std := math.Sqrt(sq/float64(vocab) - mean*mean); std < 0.3 || std > 3 {
						t.Errorf("position %d: logits spread %.3g, want about 1", pos, std)
					}
				}
			})
		}
	}
}
