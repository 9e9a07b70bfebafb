package cpu

import (
	"encoding/binary"
	"math"
	"strings"
	"testing"

	"github.com/vkinfer/vkinfer/backend"
	"github.com/vkinfer/vkinfer/quant"
)

// f32Weight places an F32 weight of rows×cols holding v.
func f32Weight(t *testing.T, b *Backend, rows, cols int, v []float32) backend.Tensor {
	t.Helper()
	raw := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(x))
	}
	w, err := b.Weight("w", quant.F32, rows, cols, raw)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestRoPEModes rotates one head at position 3 and checks both pairings
// against the rotation written out by hand.
func TestRoPEModes(t *testing.T) {
	const pos, base = 3, 10000.0
	in := []float32{1, 2, 3, 4}
	for _, neox := range []bool{false, true} {
		b := New(1)
		if err := b.InitCache(backend.Cache{Layers: 1, Context: 8, KVDim: 4}); err != nil {
			t.Fatal(err)
		}
		table := f32Weight(t, b, 1, 4, in)
		p, err := b.Record(1, func(o backend.Ops) {
			x := o.Tensor(1, 4)
			o.Embed(x, table)
			o.RoPE(x, backend.RoPE{Heads: 1, HeadDim: 4, Dims: 4, NeoX: neox, Base: base, Scale: 1})
			o.Output(x)
		})
		if err != nil {
			t.Fatal(err)
		}
		out := make([]float32, 4)
		if err := p.Run([]int32{0}, pos, out); err != nil {
			t.Fatal(err)
		}
		// Pair k turns by pos·base^(-2k/4); normal pairs (0,1),(2,3), NeoX (0,2),(1,3).
		pairs := [][2]int{{0, 1}, {2, 3}}
		if neox {
			pairs = [][2]int{{0, 2}, {1, 3}}
		}
		want := make([]float64, 4)
		for k, pr := range pairs {
			th := pos * math.Pow(base, -2*float64(k)/4)
			a, c := float64(in[pr[0]]), float64(in[pr[1]])
			want[pr[0]] = a*math.Cos(th) - c*math.Sin(th)
			want[pr[1]] = a*math.Sin(th) + c*math.Cos(th)
		}
		for i := range want {
			if math.Abs(float64(out[i])-want[i]) > 1e-5 {
				t.Fatalf("neox=%v: value %d is %v, want %v", neox, i, out[i], want[i])
			}
		}
	}
}

// TestAttentionOneKey checks that with a single cached position the output
// is that position's V row, whatever q is, and that GQA maps heads 0,1 to
// KV head 0 and heads 2,3 to KV head 1.
func TestAttentionOneKey(t *testing.T) {
	b := New(1)
	if err := b.InitCache(backend.Cache{Layers: 1, Context: 4, KVDim: 4}); err != nil {
		t.Fatal(err)
	}
	kv := f32Weight(t, b, 2, 4, []float32{0.5, -1, 2, 3, 7, 8, 9, 10}) // row 0: K, row 1: V
	q := f32Weight(t, b, 1, 8, []float32{1, 2, 3, 4, 5, 6, 7, 8})
	p, err := b.Record(1, func(o backend.Ops) {
		k, v, qt, dst := o.Tensor(1, 4), o.Tensor(1, 4), o.Tensor(1, 8), o.Tensor(1, 8)
		o.CopyRows(k, rows(o, kv), 0)
		o.CopyRows(v, rows(o, kv), 1)
		o.Embed(qt, q)
		o.StoreKV(0, k, v, nil)
		o.Attend(dst, qt, 0, backend.Attention{Heads: 4, KVHeads: 2, HeadDim: 2, Scale: 1})
		o.Output(dst)
	})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float32, 8)
	if err := p.Run([]int32{0}, 0, out); err != nil {
		t.Fatal(err)
	}
	want := []float32{7, 8, 7, 8, 9, 10, 9, 10}
	for i := range want {
		if out[i] != want[i] {
			t.Fatalf("output %v, want %v", out, want)
		}
	}
}

// rows returns an activation holding an F32 weight's values, filled at record
// time: besides Embed (one row per token) the op interface has no input op,
// and this test needs two different rows in a one-token program.
func rows(o backend.Ops, w backend.Tensor) backend.Tensor {
	t := o.Tensor(w.Rows(), w.Cols())
	copy(t.(*tensor).data, w.(*tensor).data)
	return t
}

// TestRecordErrors checks that shape mistakes fail Record with the op's
// name and that a token outside the vocabulary fails Run.
func TestRecordErrors(t *testing.T) {
	b := New(1)
	if err := b.InitCache(backend.Cache{Layers: 1, Context: 4, KVDim: 4}); err != nil {
		t.Fatal(err)
	}
	w := f32Weight(t, b, 3, 4, make([]float32, 12))
	_, err := b.Record(1, func(o backend.Ops) { o.MatMul(o.Tensor(1, 3), w, o.Tensor(1, 5)) })
	if err == nil || !strings.Contains(err.Error(), "matmul") {
		t.Fatalf("mismatched matmul: %v", err)
	}
	_, err = b.Record(1, func(o backend.Ops) { o.StoreKV(1, o.Tensor(1, 4), o.Tensor(1, 4), nil) })
	if err == nil || !strings.Contains(err.Error(), "store_kv") {
		t.Fatalf("store into a missing layer: %v", err)
	}
	p, err := b.Record(1, func(o backend.Ops) {
		x := o.Tensor(1, 4)
		o.Embed(x, w)
		o.Output(x)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Run([]int32{3}, 0, make([]float32, 4)); err == nil || !strings.Contains(err.Error(), "vocabulary") {
		t.Fatalf("token 3 of a 3-row table: %v", err)
	}
	if err := p.Run([]int32{0}, 4, make([]float32, 4)); err == nil || !strings.Contains(err.Error(), "context") {
		t.Fatalf("position past the context: %v", err)
	}
	if _, err := b.Weight("x", quant.Q2_K, 1, 256, make([]byte, quant.Q2_K.BlockBytes())); err == nil {
		t.Fatal("an unsupported type was placed")
	}
}
