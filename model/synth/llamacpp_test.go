package synth_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/vkinfer/vkinfer/backend/cpu"
	"github.com/vkinfer/vkinfer/gguf"
	"github.com/vkinfer/vkinfer/internal/fixtures"
	"github.com/vkinfer/vkinfer/model"
	"github.com/vkinfer/vkinfer/model/synth"
	"github.com/vkinfer/vkinfer/model/tokenizer"
)

// refdump is llama.cpp's output for one prompt (see
// ../shared/testdata/golden/README.md).
type refdump struct {
	Arch      string  `json:"arch"`
	NVocab    int     `json:"n_vocab"`
	Tokens    []int32 `json:"tokens"`
	Positions []struct {
		Top [][3]any `json:"top"` // id, logit, piece
	} `json:"positions"`
	Greedy []int32 `json:"greedy"`
}

// unpackLlamaCpp unpacks llama.cpp's build from the shared tools into a
// temporary directory and returns the directory of its binaries.
func unpackLlamaCpp(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	tarball := fixtures.Tool(t, "llama-cpp-vulkan.tar.xz")
	if out, err := exec.Command("tar", "-xJf", tarball, "-C", dir).CombinedOutput(); err != nil {
		t.Fatalf("unpacking %s: %v\n%s", tarball, err, out)
	}
	return filepath.Join(dir, "lb")
}

// runRefdump runs llama.cpp's refdump (in dir) on a model: the prompt's
// tokens, the top ten logits at each position and n greedy tokens.
func runRefdump(t *testing.T, dir, path, prompt string, n int) refdump {
	t.Helper()
	cmd := exec.Command(filepath.Join(dir, "refdump"), "-m", path, "-p", prompt, "-n", fmt.Sprint(n), "-k", "10",
		"--kv", "f32", "--json", "--threads", "2")
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+dir)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("llama.cpp refdump on %s: %v\n%s", path, err, stderr.Bytes())
	}
	var r refdump
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("refdump output: %v\n%s", err, stdout.Bytes())
	}
	return r
}

// TestLlamaCpp: llama.cpp (the build the golden outputs came from) loads
// every tiny preset and evaluates a prompt on it, and tokenizes the prompt
// as we do; our CPU engine's logits at every prompt position agree with
// llama.cpp's top ten, and so do the greedy continuations, until the first
// near-tie. The F16 mix is used: its
// only rounding in llama.cpp's CPU backend is of activations to f16, where
// the K-quants' would be to 8 bits.
func TestLlamaCpp(t *testing.T) {
	const (
		prompt = "hello world, Synthetic tokens: 42 ü!"
		n      = 8
		tol    = 1e-2 // on logits of about unit size, after llama.cpp's f16 activations
	)
	dir := unpackLlamaCpp(t)
	for _, preset := range []string{"tiny", "tiny-qwen2", "tiny-qwen3", "tiny-gemma3", "tiny-phi3", "tiny-llama3.2", "tiny-qwen3moe"} {
		t.Run(preset, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), preset+".gguf")
			if err := synth.Write(path, preset, "f16", 3, nil); err != nil {
				t.Fatal(err)
			}
			f, err := gguf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			ref := runRefdump(t, dir, path, prompt, n)
			// refdump's continuation ends early at an end-of-generation token.
			if ref.Arch != f.Arch() || len(ref.Greedy) == 0 || len(ref.Greedy) > n || len(ref.Positions) != len(ref.Tokens) {
				t.Fatalf("llama.cpp: arch %q, %d greedy tokens, %d positions for %d tokens", ref.Arch, len(ref.Greedy), len(ref.Positions), len(ref.Tokens))
			}
			tok, err := tokenizer.FromGGUF(f)
			if err != nil {
				t.Fatal(err)
			}
			if ids := tok.Encode(prompt, true, false); !slices.Equal(ids, ref.Tokens) {
				t.Errorf("prompt tokens %v, llama.cpp's %v", ids, ref.Tokens)
			}

			m, err := model.Load(f, cpu.New(2), model.Options{Context: 256})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			logits, err := m.Forward(ref.Tokens, 0, true)
			if err != nil {
				t.Fatal(err)
			}
			vocab := m.HP.Vocab
			worst := 0.0
			for pos, p := range ref.Positions {
				for _, e := range p.Top {
					id, want := int(e[0].(float64)), e[1].(float64)
					worst = max(worst, math.Abs(float64(logits[pos*vocab+id])-want))
				}
			}
			if worst > tol {
				t.Errorf("logits differ from llama.cpp's by up to %.3g (tolerance %g)", worst, tol)
			}
			row := logits[len(logits)-vocab:]
			compared := 0
			for i := range n {
				id, gap := argmax(row)
				if gap < tol {
					break // a near-tie: llama.cpp may round either way
				}
				compared++
				if i == len(ref.Greedy) {
					if !tok.IsEOG(id) {
						t.Errorf("greedy token %d is %d; llama.cpp's continuation %v ended at an end-of-generation token", i, id, ref.Greedy)
					}
					break
				}
				if want := ref.Greedy[i]; id != want {
					t.Fatalf("greedy token %d is %d, llama.cpp's %d (llama.cpp's continuation %v)", i, id, want, ref.Greedy)
				}
				if row, err = m.Forward([]int32{id}, len(ref.Tokens)+i, false); err != nil {
					t.Fatal(err)
				}
			}
			t.Logf("logits within %.2g of llama.cpp's; %d greedy tokens compared", worst, compared)
		})
	}
}

// argmax returns the largest logit's id and its lead over the second.
func argmax(row []float32) (int32, float64) {
	best, second := 0, -1
	for i := 1; i < len(row); i++ {
		switch {
		case row[i] > row[best]:
			best, second = i, best
		case second < 0 || row[i] > row[second]:
			second = i
		}
	}
	return int32(best), float64(row[best] - row[second])
}
