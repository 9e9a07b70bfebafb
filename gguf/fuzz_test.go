package gguf

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// FuzzOpen feeds arbitrary bytes to Open: it must return a one-line error or
// a File whose every getter and tensor slice works, never panic, and never
// allocate far beyond the input size.
func FuzzOpen(f *testing.F) {
	valid, _ := validSpec().build()
	f.Add(valid)
	for _, c := range malformedCases() {
		f.Add(c.file)
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(dir, "fuzz.gguf")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		file, err := Open(path)
		runtime.ReadMemStats(&after)
		// Decode's binary.Read garbage per element makes total allocation a
		// small multiple of the input; an unchecked count would be gigabytes.
		if a, limit := after.TotalAlloc-before.TotalAlloc, uint64(1<<20+64*len(b)); a > limit {
			t.Errorf("Open allocated %d bytes for %d input bytes", a, len(b))
		}
		if err != nil {
			if msg := err.Error(); strings.Contains(msg, "\n") || !strings.HasPrefix(msg, "gguf: ") {
				t.Errorf("error is not one line starting with \"gguf: \": %q", msg)
			}
			return
		}
		defer file.Close()
		exercise(t, file)
	})
}

// exercise calls every getter on every key and checks every tensor's bytes.
func exercise(t *testing.T, f *File) {
	for _, k := range f.Keys() {
		if !f.Has(k) {
			t.Errorf("Keys lists %q but Has denies it", k)
		}
		f.String(k)
		f.Uint(k)
		f.Int(k)
		f.Float(k)
		f.Bool(k)
		f.Strings(k)
		f.Float32s(k)
		f.Int32s(k)
	}
	end := uint64(f.Size())
	for _, ts := range f.Tensors() {
		n, err := tensorBytes(ts.Type, ts.Shape)
		if err != nil || n != ts.Bytes || ts.Offset+ts.Bytes > end {
			t.Errorf("tensor %q: %+v (size %d, err %v)", ts.Name, ts, n, err)
		}
		if got, ok := f.Tensor(ts.Name); !ok || got != ts {
			t.Errorf("Tensor(%q) does not find it", ts.Name)
		}
		if d := f.Data(ts); uint64(len(d)) != ts.Bytes {
			t.Errorf("tensor %q: Data has %d bytes, want %d", ts.Name, len(d), ts.Bytes)
		}
	}
}
