package shaders

import (
	"encoding/binary"
	"slices"
	"testing"
)

func TestEmbedded(t *testing.T) {
	names := Names()
	if !slices.Contains(names, "test_saxpy") {
		t.Fatalf("Names() = %v, want test_saxpy among them", names)
	}
	if !slices.IsSorted(names) {
		t.Errorf("Names() not sorted: %v", names)
	}
	for _, n := range names {
		b := SPIRV(n)
		if len(b) < 20 || len(b)%4 != 0 || binary.LittleEndian.Uint32(b) != 0x07230203 {
			t.Errorf("%s: not SPIR-V (%d bytes)", n, len(b))
		}
	}
}

func TestUnknownPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("SPIRV of an unknown name did not panic")
		}
	}()
	SPIRV("no_such_shader")
}
