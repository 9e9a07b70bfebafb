package vk

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/vkinfer/vkinfer/shaders"
)

func TestLocalSizeFromSpecialization(t *testing.T) {
	words, err := spirvWords(shaders.SPIRV("test_saxpy"))
	must(t, err)
	for _, c := range []struct {
		spec []uint32
		want [3]uint32
	}{
		{nil, [3]uint32{1, 1, 1}}, // GLSL's default for local_size_x_id
		{[]uint32{64}, [3]uint32{64, 1, 1}},
		{[]uint32{7, 99}, [3]uint32{7, 1, 1}}, // extra constants are ignored
	} {
		got, err := localSize(words, c.spec)
		if err != nil || got != c.want {
			t.Errorf("spec %v: %v, %v; want %v", c.spec, got, err, c.want)
		}
	}
}

// spirvModule assembles a minimal module around the given instructions.
func spirvModule(insts ...[]uint32) []byte {
	words := []uint32{spvMagic, 0x10500, 0, 100, 0}
	for _, in := range insts {
		words = append(words, uint32(len(in))<<16|in[0])
		words = append(words, in[1:]...)
	}
	b := make([]byte, 4*len(words))
	for i, w := range words {
		binary.LittleEndian.PutUint32(b[4*i:], w)
	}
	return b
}

func TestLocalSizeForms(t *testing.T) {
	entry := []uint32{opEntryPoint, execModelGLCompute, 1, 0x6e69616d, 0} // "main"
	for _, c := range []struct {
		name string
		code []byte
		want [3]uint32
		err  string
	}{
		{"literal", spirvModule(entry, []uint32{opExecutionMode, 1, modeLocalSize, 16, 2, 3}), [3]uint32{16, 2, 3}, ""},
		{"ids", spirvModule(entry, []uint32{opExecutionModeID, 1, modeLocalSizeID, 10, 11, 11},
			[]uint32{opConstant, 5, 10, 32}, []uint32{opConstant, 5, 11, 1}), [3]uint32{32, 1, 1}, ""},
		{"no entry", spirvModule([]uint32{opExecutionMode, 1, modeLocalSize, 16, 2, 3}), [3]uint32{}, "no GLCompute entry point"},
		{"no size", spirvModule(entry), [3]uint32{}, "no workgroup size"},
		{"unknown id", spirvModule(entry, []uint32{opExecutionModeID, 1, modeLocalSizeID, 10, 11, 11}), [3]uint32{}, "unknown constant"},
	} {
		words, err := spirvWords(c.code)
		must(t, err)
		got, err := localSize(words, nil)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: err %v, want %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%s: %v, %v; want %v", c.name, got, err, c.want)
		}
	}
	// A length that runs past the end is an error, not a panic.
	bad := spirvModule(entry)
	binary.LittleEndian.PutUint32(bad[20:], 200<<16|opEntryPoint)
	words, _ := spirvWords(bad)
	if _, err := localSize(words, nil); err == nil || !strings.Contains(err.Error(), "bad length") {
		t.Errorf("overlong instruction: %v", err)
	}
}

func FuzzLocalSize(f *testing.F) {
	f.Add(shaders.SPIRV("test_saxpy"))
	f.Add(shaders.SPIRV("test_subgroup"))
	f.Fuzz(func(t *testing.T, code []byte) {
		words, err := spirvWords(code)
		if err != nil {
			return
		}
		localSize(words, []uint32{3, 5}) // must not panic
	})
}
