package sample

import "testing"

// BenchmarkSample128k: one sample over a 128k vocabulary with the CLI's
// defaults (top-k 40, top-p 0.95, min-p 0.05, temperature 0.8).
func BenchmarkSample128k(b *testing.B) {
	logits := make([]float32, 128256)
	for i := range logits {
		logits[i] = float32(i%977) / 100
	}
	s := New(Defaults())
	work := make([]float32, len(logits))
	for b.Loop() {
		copy(work, logits)
		s.Sample(work)
	}
}
