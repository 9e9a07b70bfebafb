package vk

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// roundTrip writes random bytes at an odd offset and reads them back in
// differently aligned pieces.
func roundTrip(t *testing.T, d *Device, size int64, host bool, off int64, n int) {
	t.Helper()
	b, err := d.NewBuffer(size, host)
	must(t, err)
	defer b.Free()
	r := rand.New(rand.NewPCG(uint64(size), uint64(off)))
	data := make([]byte, n)
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	must(t, b.Write(off, data))
	got := make([]byte, n)
	must(t, b.Read(off, got))
	if !bytes.Equal(got, data) {
		t.Fatalf("round trip of %d bytes at %d differs", n, off)
	}
	// Read back again in three uneven slices.
	cuts := []int{0, n / 3, 2 * n / 3, n}
	for i := 0; i+1 < len(cuts); i++ {
		part := make([]byte, cuts[i+1]-cuts[i])
		must(t, b.Read(off+int64(cuts[i]), part))
		if !bytes.Equal(part, data[cuts[i]:cuts[i+1]]) {
			t.Fatalf("partial read [%d, %d) differs", cuts[i], cuts[i+1])
		}
	}
}

func TestBufferRoundTripSmallStaging(t *testing.T) {
	d := openTest(t)
	d.stagingMax = 1000 // forces many chunks, the last a partial one
	for _, host := range []bool{false, true} {
		roundTrip(t, d, 20011, host, 13, 10007)
		roundTrip(t, d, 7, host, 3, 3)
	}
	if d.staging == nil || d.staging.size != 1000 {
		t.Fatalf("staging buffer = %v, want 1000 bytes", d.staging)
	}
}

func TestBufferRoundTripLargerThanStaging(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 64 MiB+ through lavapipe")
	}
	d := openTest(t)
	n := defaultStaging + 12345
	roundTrip(t, d, int64(n)+64, false, 7, n)
	if d.staging.size != defaultStaging {
		t.Fatalf("staging buffer grew to %d, want the %d bound", d.staging.size, defaultStaging)
	}
}

func TestBufferErrors(t *testing.T) {
	d := openTest(t)
	info := d.Info()
	cases := []struct {
		size int64
		want string
	}{
		{0, "size must be positive"},
		{-5, "size must be positive"},
		{int64(info.MaxAllocation) + 1, "exceeds the device's largest allocation"},
	}
	if info.MaxStorageRange < info.MaxAllocation { // lavapipe: 128 MiB < 2 GiB
		cases = append(cases, struct {
			size int64
			want string
		}{int64(info.MaxStorageRange) + 1, "largest storage buffer range"})
	}
	for _, c := range cases {
		if _, err := d.NewBuffer(c.size, false); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewBuffer(%d) = %v, want %q", c.size, err, c.want)
		}
	}
	b, err := d.NewBuffer(16, false)
	must(t, err)
	for _, c := range []struct {
		off int64
		n   int
	}{{-1, 4}, {13, 4}, {17, 0}, {0, 17}} {
		if err := b.Write(c.off, make([]byte, c.n)); err == nil || !strings.Contains(err.Error(), "outside the 16-byte buffer") {
			t.Errorf("Write(%d, %d bytes) = %v", c.off, c.n, err)
		}
		if err := b.Read(c.off, make([]byte, c.n)); err == nil {
			t.Errorf("Read(%d, %d bytes) succeeded", c.off, c.n)
		}
	}
	b.Free()
	b.Free() // a second Free is harmless
}

func TestUseAfterClose(t *testing.T) {
	d := openTest(t)
	b, err := d.NewBuffer(64, true)
	must(t, err)
	s := d.NewSequence()
	d.Close()
	if err := b.Write(0, []byte{1}); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("Write after Close = %v", err)
	}
	if _, err := d.NewBuffer(64, true); err == nil {
		t.Error("NewBuffer after Close succeeded")
	}
	if err := s.End(); err == nil {
		t.Error("End after Close succeeded")
	}
	b.Free()
	s.Free()
}

func TestCopy(t *testing.T) {
	d := openTest(t)
	src, err := d.NewBuffer(64, true)
	must(t, err)
	dst, err := d.NewBuffer(64, false)
	must(t, err)
	data := make([]byte, 64)
	for i := range data {
		data[i] = byte(i)
	}
	must(t, src.Write(0, data))
	must(t, dst.Write(0, make([]byte, 64)))
	s := d.NewSequence()
	s.Copy(Binding{Buf: dst, Off: 3}, Binding{Buf: src, Off: 10, Size: 5})
	s.Copy(Binding{Buf: dst, Off: 40}, Binding{Buf: src, Off: 60}) // the rest of src: 4 bytes
	must(t, s.End())
	must(t, s.Run())
	got := make([]byte, 64)
	must(t, dst.Read(0, got))
	want := make([]byte, 64)
	copy(want[3:], data[10:15])
	copy(want[40:], data[60:])
	if !bytes.Equal(got, want) {
		t.Fatalf("after copies: %v, want %v", got, want)
	}

	bad := d.NewSequence()
	bad.Copy(Binding{Buf: src, Off: 4}, Binding{Buf: src, Off: 0, Size: 8})
	if err := bad.End(); err == nil || !strings.Contains(err.Error(), "overlap") {
		t.Errorf("overlapping copy: %v", err)
	}
	bad = d.NewSequence()
	bad.Copy(Binding{Buf: dst, Off: 60}, Binding{Buf: src, Size: 8})
	if err := bad.End(); err == nil || !strings.Contains(err.Error(), "outside") {
		t.Errorf("copy past the end: %v", err)
	}
}

// TestDecodeF32 checks the logits' conversion from a mapping, whose fast
// path is a copy: every bit pattern (NaN payloads, infinities, negative
// zero) as the value-by-value decoding gives it, from an aligned and an
// unaligned start, and a source longer than the values.
func TestDecodeF32(t *testing.T) {
	words := []uint32{0, 0x80000000, 0x3F800000, 0x7F800000, 0xFF800000, 0x7FC00001, 0xFFFFFFFF, 0x00000001, 0x12345678}
	raw := make([]byte, 1+4*len(words)+4)
	for off := range 2 {
		src := raw[off : off+4*len(words)+4]
		for i, w := range words {
			binary.LittleEndian.PutUint32(src[4*i:], w)
		}
		got := make([]float32, len(words))
		decodeF32(got, src)
		for i, w := range words {
			if b := math.Float32bits(got[i]); b != w {
				t.Errorf("offset %d: value %d is %#08x, want %#08x", off, i, b, w)
			}
		}
	}
	decodeF32(nil, nil)
	// Past parallelBytes, in pieces: every value in its place.
	n := parallelBytes/4*3 + 5
	big := make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(big[4*i:], uint32(i)*2654435761)
	}
	got := make([]float32, n)
	decodeF32Parallel(got, big)
	for i, v := range got {
		if b := math.Float32bits(v); b != uint32(i)*2654435761 {
			t.Fatalf("value %d of %d is %#08x, want %#08x", i, n, b, uint32(i)*2654435761)
		}
	}
}
