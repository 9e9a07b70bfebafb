package vk

import (
	"os"
	"strings"
	"testing"

	"github.com/vkinfer/vkinfer/shaders"
)

func subgroupSpec(wg uint32, size int) PipelineSpec {
	return PipelineSpec{
		Name:         "test_subgroup",
		SPIRV:        shaders.SPIRV("test_subgroup"),
		Bindings:     1,
		Spec:         []uint32{wg},
		SubgroupSize: size,
	}
}

// runSubgroup reports the subgroup size and count the kernel observed.
func runSubgroup(t *testing.T, d *Device, p *Pipeline) (size, count uint32) {
	t.Helper()
	out, err := d.NewBuffer(8, true)
	must(t, err)
	defer out.Free()
	s := d.NewSequence()
	defer s.Free()
	s.Dispatch(p, []Binding{{Buf: out}}, nil, 1, 1, 1)
	must(t, s.End())
	must(t, s.Run())
	var b [8]byte
	must(t, out.Read(0, b[:]))
	return uint32(b[0]) | uint32(b[1])<<8, uint32(b[4]) | uint32(b[5])<<8
}

func TestRequiredSubgroupSize(t *testing.T) {
	d := openTest(t)
	info := d.Info()
	if !info.SizeControl {
		_, err := d.Pipeline(subgroupSpec(64, info.SubgroupSize))
		if err == nil || !strings.Contains(err.Error(), "cannot require") {
			t.Fatalf("without size control: %v", err)
		}
		return
	}
	for sz := info.MinSubgroupSize; sz <= info.MaxSubgroupSize; sz *= 2 {
		p, err := d.Pipeline(subgroupSpec(64, sz))
		must(t, err)
		gotSize, gotCount := runSubgroup(t, d, p)
		if int(gotSize) != sz || int(gotCount) != 64/sz {
			t.Errorf("required %d: kernel saw subgroup size %d, %d subgroups; want %d, %d", sz, gotSize, gotCount, sz, 64/sz)
		}
	}
	// Outside the range: the error names the supported range.
	big := info.MaxSubgroupSize * 4
	_, err := d.Pipeline(subgroupSpec(256, big))
	if want := "allows powers of two in ["; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("subgroup size %d: %v, want %q", big, err, want)
	}
	if info.MinSubgroupSize == 8 && info.MaxSubgroupSize == 8 {
		_, err := d.Pipeline(subgroupSpec(64, 32))
		if err == nil || !strings.Contains(err.Error(), "subgroup size 32 is not supported") || !strings.Contains(err.Error(), "[8, 8]") {
			t.Errorf("lavapipe, size 32: %v", err)
		}
	}
	// Full subgroups need the workgroup to be a whole number of them.
	_, err = d.Pipeline(subgroupSpec(uint32(info.MinSubgroupSize)+1, info.MinSubgroupSize))
	if err == nil || !strings.Contains(err.Error(), "not a multiple of the required subgroup size") {
		t.Errorf("ragged workgroup: %v", err)
	}
}

func TestPipelineMemo(t *testing.T) {
	d := openTest(t)
	a := saxpy(t, d, 64)
	if b := saxpy(t, d, 64); a != b {
		t.Error("same spec built twice")
	}
	if c := saxpy(t, d, 32); a == c || c.LocalSize()[0] != 32 {
		t.Error("different specialization shared a pipeline")
	}
	spec := subgroupSpec(64, 0)
	spec.Name = "test_saxpy"
	spec.Spec = []uint32{64}
	if _, err := d.Pipeline(spec); err == nil || !strings.Contains(err.Error(), "already built") {
		t.Errorf("reused name with other SPIR-V: %v", err)
	}
}

func TestPipelineErrors(t *testing.T) {
	d := openTest(t)
	good := shaders.SPIRV("test_saxpy")
	for _, c := range []struct {
		name string
		spec PipelineSpec
		want string
	}{
		{"no name", PipelineSpec{SPIRV: good, Bindings: 2, PushSize: 8}, "no name"},
		{"short", PipelineSpec{Name: "e1", SPIRV: good[:10], Bindings: 2}, "whole number of words"},
		{"magic", PipelineSpec{Name: "e2", SPIRV: make([]byte, 40), Bindings: 2}, "magic"},
		{"bindings", PipelineSpec{Name: "e3", SPIRV: good, Bindings: 99}, "99 bindings"},
		{"push", PipelineSpec{Name: "e4", SPIRV: good, Bindings: 2, PushSize: 6}, "multiple of 4"},
		{"push big", PipelineSpec{Name: "e5", SPIRV: good, Bindings: 2, PushSize: 4096}, "push constant size"},
		{"workgroup", PipelineSpec{Name: "e6", SPIRV: good, Bindings: 2, PushSize: 8, Spec: []uint32{4096}}, "outside the device's maximum"},
		{"workgroup 0", PipelineSpec{Name: "e7", SPIRV: good, Bindings: 2, PushSize: 8, Spec: []uint32{0}}, "workgroup size"},
	} {
		_, err := d.Pipeline(c.spec)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

func TestDispatchErrors(t *testing.T) {
	d := openTest(t)
	p := saxpy(t, d, 64)
	b, err := d.NewBuffer(1024, false)
	must(t, err)
	align := int64(d.phys.limits.MinStorageBufferOffsetAlignment)
	for _, c := range []struct {
		name string
		rec  func(s *Sequence)
		want string
	}{
		{"bindings", func(s *Sequence) { s.Dispatch(p, []Binding{{Buf: b}}, Push(uint32(1), float32(1)), 1, 1, 1) }, "1 bindings, the pipeline has 2"},
		{"push", func(s *Sequence) { s.Dispatch(p, []Binding{{Buf: b}, {Buf: b}}, nil, 1, 1, 1) }, "0 bytes of push constants"},
		{"nil buffer", func(s *Sequence) { s.Dispatch(p, []Binding{{}, {Buf: b}}, Push(uint32(1), float32(1)), 1, 1, 1) }, "no buffer"},
		{"range", func(s *Sequence) {
			s.Dispatch(p, []Binding{{Buf: b, Off: 512, Size: 1024}, {Buf: b}}, Push(uint32(1), float32(1)), 1, 1, 1)
		}, "outside the 1024-byte buffer"},
		{"groups", func(s *Sequence) {
			s.Dispatch(p, []Binding{{Buf: b}, {Buf: b}}, Push(uint32(1), float32(1)), 1<<31, 1, 1)
		}, "workgroups exceed"},
		{"nil pipeline", func(s *Sequence) { s.Dispatch(nil, nil, nil, 1, 1, 1) }, "pipeline is nil"},
		{"after end", func(s *Sequence) { must(t, s.End()); s.Barrier() }, "after End"},
	} {
		s := d.NewSequence()
		c.rec(s)
		err := s.End()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: End = %v, want %q", c.name, err, c.want)
		}
		if err := s.Run(); err == nil {
			t.Errorf("%s: Run succeeded after a recording error", c.name)
		}
		s.Free()
	}
	if align > 1 {
		s := d.NewSequence()
		s.Dispatch(p, []Binding{{Buf: b, Off: align / 2}, {Buf: b}}, Push(uint32(1), float32(1)), 1, 1, 1)
		if err := s.End(); err == nil || !strings.Contains(err.Error(), "storage alignment") {
			t.Errorf("misaligned binding: %v", err)
		}
		s.Free()
	}
	s := d.NewSequence()
	if err := s.Run(); err == nil || !strings.Contains(err.Error(), "before End") {
		t.Errorf("Run before End: %v", err)
	}
	s.Free()
}

func TestPipelineCacheFile(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	d := openTest(t)
	path := d.cache.path
	if path == "" || d.cache.loaded {
		t.Fatalf("fresh cache: path %q loaded %v", path, d.cache.loaded)
	}
	saxpy(t, d, 64)
	d.Close()
	data, err := os.ReadFile(path)
	if err != nil || !validCacheData(data, d.phys) {
		t.Fatalf("cache file after Close: %d bytes, err %v", len(data), err)
	}

	d2 := openTest(t)
	if !d2.cache.loaded {
		t.Error("valid cache file was not loaded")
	}
	saxpy(t, d2, 64)
	d2.Close()

	// Garbage of every kind is ignored, and pipelines still build.
	for _, garbage := range [][]byte{nil, []byte("junk"), append(append([]byte(nil), data[:32]...), 0xff), func() []byte {
		b := append([]byte(nil), data...)
		b[16] ^= 0xff // another pipelineCacheUUID
		return b
	}()} {
		must(t, os.WriteFile(path, garbage, 0o644))
		d3 := openTest(t)
		if d3.cache.loaded && !validCacheData(garbage, d3.phys) {
			t.Errorf("corrupt cache (%d bytes) was loaded", len(garbage))
		}
		saxpy(t, d3, 64)
		d3.Close()
	}
}
