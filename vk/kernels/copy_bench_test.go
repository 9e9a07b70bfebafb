package kernels

import (
	"testing"

	"github.com/vkinfer/vkinfer/vk"
)

// BenchmarkCopy measures the device's copy bandwidth with vkCmdCopyBuffer
// (bytes read + written per second, by wall time over a sequence of large
// copies, so submission overhead is negligible). It is the yardstick the
// matrix-vector GB/s are compared with.
func BenchmarkCopy(b *testing.B) {
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
		s.Copy(vk.Binding{Buf: dst, Size: size}, vk.Binding{Buf: src, Size: size})
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
