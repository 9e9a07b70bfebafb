package model_test

import (
	"testing"

	"github.com/vkinfer/vkinfer/backend/cpu"
	"github.com/vkinfer/vkinfer/internal/golden"
)

// TestGoldenCPU checks the CPU engine against every llama.cpp golden run:
// F32/F16 models to 1e-3 with identical greedy text, quantized ones as
// golden/README.md allows.
func TestGoldenCPU(t *testing.T) {
	for name, tol := range golden.Files(t) {
		t.Run(name, func(t *testing.T) {
			golden.Check(t, cpu.New(0), name, tol)
		})
	}
}
