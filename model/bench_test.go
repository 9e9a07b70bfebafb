package model_test

import (
	"path/filepath"
	"testing"

	"github.com/vkinfer/vkinfer/backend/cpu"
	"github.com/vkinfer/vkinfer/gguf"
	"github.com/vkinfer/vkinfer/internal/fixtures"
	"github.com/vkinfer/vkinfer/model"
	"github.com/vkinfer/vkinfer/model/synth"
)

// benchDecode measures one decode step of the CPU engine at a short context
// (the position cycles over 64..127 so attention stays comparable).
func benchDecode(b *testing.B, path string) {
	f, err := gguf.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	m, err := model.Load(f, cpu.New(0), model.Options{Context: 128})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	prompt := make([]int32, 64)
	for i := range prompt {
		prompt[i] = int32(1 + i%200)
	}
	if _, err := m.Forward(prompt, 0, false); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, err := m.Forward([]int32{int32(3 + i%100)}, 64+i%64, false); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
}

func BenchmarkDecodeStories260K(b *testing.B) { benchDecode(b, fixtures.Path(b, "stories260K.gguf")) }

func BenchmarkDecodeSynthTiny(b *testing.B) {
	p := filepath.Join(b.TempDir(), "tiny.gguf")
	if err := synth.Write(p, "tiny", "q4_k_m", 1, nil); err != nil {
		b.Fatal(err)
	}
	benchDecode(b, p)
}
