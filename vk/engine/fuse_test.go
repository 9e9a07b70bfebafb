package engine_test

import (
	"testing"

	"github.com/vkinfer/vkinfer/vk/engine"
)

// TestParseFusions: the names VKINFER_UNFUSE takes, and a clear error for
// any other.
func TestParseFusions(t *testing.T) {
	for s, want := range map[string]engine.Fusion{
		"":               0,
		"stack":          engine.FuseStack,
		" rope , glu ":   engine.FuseRoPE | engine.FuseGLU,
		"all":            engine.FuseStack | engine.FuseRoPE | engine.FuseGLU | engine.FuseMoE | engine.FuseMoEGLU | engine.FuseRouter | engine.FuseHeads | engine.FuseNorm,
		"moe,moeglu":     engine.FuseMoE | engine.FuseMoEGLU,
		"router":         engine.FuseRouter,
		"heads":          engine.FuseHeads,
		"norm":           engine.FuseNorm,
		"glu,stack,glu,": engine.FuseStack | engine.FuseGLU,
	} {
		got, err := engine.ParseFusions(s)
		if err != nil || got != want {
			t.Errorf("ParseFusions(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	if f, err := engine.ParseFusions("stack,swiglu"); err == nil {
		t.Errorf("ParseFusions(\"stack,swiglu\") = %v, want an error", f)
	}
	if s := (engine.FuseStack | engine.FuseGLU).String(); s != "stack,glu" {
		t.Errorf("String() = %q", s)
	}
}
