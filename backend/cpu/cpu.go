// Package cpu is the reference backend: plain Go, float32 values with float64
// accumulation where it is cheap, parallel across output rows. Every GPU
// kernel is tested against it, and it runs models when no Vulkan device exists.
package cpu

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/vkinfer/vkinfer/backend"
	"github.com/vkinfer/vkinfer/quant"
)

// tensor is either an f32 activation (data) or a weight kept in its GGUF
// encoding (raw), dequantized row by row as the ops need it.
type tensor struct {
	rows, cols int
	data       []float32
	typ        quant.Type
	raw        []byte
	rowBytes   int
}

func (t *tensor) Rows() int { return t.rows }
func (t *tensor) Cols() int { return t.cols }

// row returns row r of an activation.
func (t *tensor) row(r int) []float32 { return t.data[r*t.cols : (r+1)*t.cols] }

// rawRow returns the encoded bytes of row r of a weight.
func (t *tensor) rawRow(r int) []byte { return t.raw[r*t.rowBytes : (r+1)*t.rowBytes] }

// Backend is the CPU backend.
type Backend struct {
	threads int
	// F16KV rounds K and V to f16 as they enter the cache, as the Vulkan
	// backend stores them, so the two engines can be compared closely.
	F16KV bool
	cache backend.Cache
	k, v  [][]float32 // per layer: [cache.Sequences()][cache.Slots(layer)][KVDim]
}

// New returns a CPU backend using up to threads goroutines per op
// (threads <= 0 means one per CPU).
func New(threads int) *Backend {
	if threads <= 0 {
		threads = runtime.NumCPU()
	}
	return &Backend{threads: threads}
}

// Name implements backend.Backend.
func (b *Backend) Name() string { return fmt.Sprintf("CPU (%d threads)", b.threads) }

// Weight implements backend.Backend. The bytes stay in the caller's mmap.
func (b *Backend) Weight(name string, t quant.Type, rows, cols int, data []byte) (backend.Tensor, error) {
	rb, err := backend.CheckWeight(name, t, rows, cols, data)
	if err != nil {
		return nil, err
	}
	w := &tensor{rows: rows, cols: cols, typ: t, raw: data, rowBytes: rb}
	if t == quant.F32 {
		// F32 weights (norms, biases, small models' matrices) are read as
		// plain float slices by the ops: a view of the bytes where they are
		// aligned (GGUF aligns tensor data to 32 bytes), a copy otherwise.
		if uintptr(unsafe.Pointer(unsafe.SliceData(data)))%4 == 0 {
			w.data = unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(data))), rows*cols)
		} else {
			w.data = make([]float32, rows*cols)
			if err := quant.Dequantize(t, data, w.data); err != nil {
				return nil, fmt.Errorf("tensor %q: %w", name, err)
			}
		}
	}
	return w, nil
}

// Reserve implements backend.Backend. Weights stay in the file's mmap and
// the KV cache is allocated by InitCache, so there is nothing to check ahead.
func (b *Backend) Reserve(uint64, backend.Cache) error { return nil }

// InitCache implements backend.Backend. Layer l keeps c.Slots(l)
// positions of each sequence: all of them for a global layer, a ring for a
// sliding one.
func (b *Backend) InitCache(c backend.Cache) error {
	if err := c.Check(); err != nil {
		return fmt.Errorf("cpu: %w", err)
	}
	b.cache = c
	b.k = make([][]float32, c.Layers)
	b.v = make([][]float32, c.Layers)
	for l := range c.Layers {
		size := c.Sequences() * c.Slots(l) * c.KVDim
		b.k[l] = make([]float32, size)
		b.v[l] = make([]float32, size)
	}
	return nil
}

// Record implements backend.Backend: the program is the list of op closures.
func (b *Backend) Record(n int, build func(backend.Ops)) (backend.Program, error) {
	return b.record(n, false, build)
}

// RecordRows implements backend.MultiSeq.
func (b *Backend) RecordRows(n int, build func(backend.Ops)) (backend.Program, error) {
	if n > b.cache.MaxRows() {
		return nil, fmt.Errorf("cpu: a row program of %d rows, at most %d (the cache's sequences or its batch)", n, b.cache.MaxRows())
	}
	return b.record(n, true, build)
}

func (b *Backend) record(n int, rows bool, build func(backend.Ops)) (backend.Program, error) {
	if n <= 0 {
		return nil, fmt.Errorf("cpu: batch of %d tokens", n)
	}
	p := &program{b: b, n: n, rows: rows, routed: map[*tensor]int{}}
	build(p)
	if p.err != nil {
		return nil, p.err
	}
	return p, nil
}

// Close implements backend.Backend.
func (b *Backend) Close() { b.k, b.v = nil, nil }
