package kernels

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/vkinfer/vkinfer/shaders"
	"github.com/vkinfer/vkinfer/vk"
)

// BenchmarkCopy measures the device's copy bandwidth with vkCmdCopyBuffer
// (bytes read + written per second, by wall time over a sequence of large
// copies, so submission overhead is negligible). It is the yardstick the
// issue names for the matrix-vector GB/s.
func BenchmarkCopy(b *testing.B) {
	benchCopies(b, func(s *vk.Sequence, dst, src *vk.Buffer) error {
		s.Copy(vk.Binding{Buf: dst}, vk.Binding{Buf: src})
		return nil
	})
}

// BenchmarkCopyShader is BenchmarkCopy with a compute shader streaming
// 16-byte words: the bandwidth a kernel can reach, to compare the decode
// kernels with when vkCmdCopyBuffer is slow (it was on NVIDIA's driver).
func BenchmarkCopyShader(b *testing.B) {
	benchCopies(b, func(s *vk.Sequence, dst, src *vk.Buffer) error {
		return recordShaderCopy(benchDev, s, dst, src, int(src.Size()/16))
	})
}

// benchCopies times one sequence of 16 copies of 256 MiB (or the device's
// largest binding) recorded by record, with a barrier after each.
func benchCopies(b *testing.B, record func(s *vk.Sequence, dst, src *vk.Buffer) error) {
	benchSetup(b)
	size := int64(256 << 20)
	if lim := int64(benchDev.Info().MaxStorageRange); lim < size {
		size = lim &^ 255
	}
	src, err := benchDev.NewBuffer(size, false)
	if err != nil {
		b.Fatal(err)
	}
	defer src.Free()
	dst, err := benchDev.NewBuffer(size, false)
	if err != nil {
		b.Fatal(err)
	}
	defer dst.Free()
	const copies = 16
	s := benchDev.NewSequence()
	defer s.Free()
	for range copies {
		if err := record(s, dst, src); err != nil {
			b.Fatal(err)
		}
		s.Barrier()
	}
	if err := s.End(); err != nil {
		b.Fatal(err)
	}
	if err := s.Run(); err != nil { // warm-up
		b.Fatal(err)
	}
	b.SetBytes(2 * size * copies)
	b.ResetTimer()
	for b.Loop() {
		if err := s.Run(); err != nil {
			b.Fatal(err)
		}
	}
}

// copyItems is how many 16-byte words each lane of bench_copy moves.
const copyItems = 4

// recordShaderCopy records bench_copy over the first n 16-byte words.
func recordShaderCopy(d *vk.Device, s *vk.Sequence, dst, src *vk.Buffer, n int) error {
	const lanes = 256
	p, err := d.Pipeline(vk.PipelineSpec{Name: "bench_copy", SPIRV: shaders.SPIRV("bench_copy"),
		Bindings: 2, PushSize: 4, Spec: []uint32{lanes, copyItems}})
	if err != nil {
		return err
	}
	groups := uint32(ceil(n, lanes*copyItems))
	s.Dispatch(p, []vk.Binding{{Buf: dst}, {Buf: src}}, vk.Push(uint32(n)), groups, 1, 1)
	return nil
}

// TestShaderCopy checks the bandwidth kernel really copies, for awkward word
// counts (a partial last workgroup, a partial last item).
func TestShaderCopy(t *testing.T) {
	d := setup(t).dev
	for _, n := range []int{1, 7, 1025, 4099} {
		src := make([]byte, 16*n)
		for i := range src {
			src[i] = byte(rand.IntN(256))
		}
		sb, db := buffer(t, int64(len(src)), src), buffer(t, int64(len(src))+16, make([]byte, len(src)+16))
		s := d.NewSequence()
		if err := recordShaderCopy(d, s, db, sb, n); err != nil {
			t.Fatal(err)
		}
		if err := s.End(); err != nil {
			t.Fatal(err)
		}
		if err := s.Run(); err != nil {
			t.Fatal(err)
		}
		s.Free()
		got := make([]byte, len(src)+16)
		if err := db.Read(0, got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got[:len(src)], src) || !bytes.Equal(got[len(src):], make([]byte, 16)) {
			t.Fatalf("n=%d: copy differs from the source or wrote past it", n)
		}
	}
}
