package model_test

import (
	"maps"
	"testing"

	"github.com/vkinfer/vkinfer/backend/cpu"
	"github.com/vkinfer/vkinfer/internal/golden"
)

// TestGoldenCPU checks the CPU engine against every llama.cpp golden run,
// the llama-family models' and those of the other architectures
// (arch/golden): F32/F16 models to 1e-3 with identical greedy text up to a
// near-tie, quantized ones as golden/README.md allows.
func TestGoldenCPU(t *testing.T) {
	files := golden.Files(t)
	maps.Copy(files, golden.ArchFiles(t))
	for name, tol := range files {
		t.Run(name, func(t *testing.T) {
			golden.Check(t, cpu.New(0), name, tol)
		})
	}
}
