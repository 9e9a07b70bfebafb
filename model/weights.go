package model

import (
	"fmt"
	"slices"

	"github.com/vkinfer/vkinfer/backend"
	"github.com/vkinfer/vkinfer/gguf"
)

// layer holds the weights of one transformer block. Biases are nil when the
// file has none (llama); qwen2 has q/k/v biases.
type layer struct {
	attnNorm, wq, wk, wv, wo backend.Tensor
	bq, bk, bv               backend.Tensor
	ffnNorm, gate, up, down  backend.Tensor
}

type weights struct {
	tokEmbd, outNorm, output backend.Tensor
	ropeFactors              backend.Tensor
	layers                   []layer
}

// binder places tensors on a backend by name, checking each shape against the
// hyper-parameters so a mismatched file fails with the tensor's name.
type binder struct {
	f        *gguf.File
	be       backend.Backend
	progress func(done, total uint64)
	done     uint64
	total    uint64
}

// bind places tensor name, whose GGML shape must be [cols, rows] (rows omitted
// for 1-D tensors: rows == 1).
func (b *binder) bind(name string, cols, rows int) (backend.Tensor, error) {
	t, ok := b.f.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("model: tensor %q is missing", name)
	}
	return b.place(t, cols, rows)
}

// optional binds name when present and returns nil otherwise.
func (b *binder) optional(name string, cols, rows int) (backend.Tensor, error) {
	t, ok := b.f.Tensor(name)
	if !ok {
		return nil, nil
	}
	return b.place(t, cols, rows)
}

func (b *binder) place(t *gguf.Tensor, cols, rows int) (backend.Tensor, error) {
	want := []uint64{uint64(cols), uint64(rows)}
	if rows == 1 {
		want = want[:1]
	}
	if !sameShape(t.Shape, want) {
		return nil, fmt.Errorf("model: tensor %q has shape %v, want %v", t.Name, t.Shape, want)
	}
	if !t.Type.Supported() {
		return nil, fmt.Errorf("model: tensor %q: unsupported tensor type %s", t.Name, t.Type)
	}
	w, err := b.be.Weight(t.Name, t.Type, rows, cols, b.f.Data(t))
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	b.done += t.Bytes
	if b.progress != nil {
		b.progress(b.done, b.total)
	}
	return w, nil
}

// sameShape compares GGML shapes, ignoring trailing 1s (a [64] norm may be stored as [64, 1]).
func sameShape(a, b []uint64) bool {
	trim := func(s []uint64) []uint64 {
		for len(s) > 1 && s[len(s)-1] == 1 {
			s = s[:len(s)-1]
		}
		return s
	}
	return slices.Equal(trim(a), trim(b))
}

func bindWeights(b *binder, hp HParams) (*weights, error) {
	for _, t := range b.f.Tensors() {
		b.total += t.Bytes
	}
	w := &weights{layers: make([]layer, hp.Layers)}
	q, kv := hp.Heads*hp.HeadDim, hp.KVHeads*hp.HeadDim
	var err error
	// must records the first error so the binding list below reads as a table.
	must := func(t backend.Tensor, e error) backend.Tensor {
		if err == nil {
			err = e
		}
		return t
	}
	w.tokEmbd = must(b.bind("token_embd.weight", hp.Embd, hp.Vocab))
	for i := range w.layers {
		l := &w.layers[i]
		p := fmt.Sprintf("blk.%d.", i)
		l.attnNorm = must(b.bind(p+"attn_norm.weight", hp.Embd, 1))
		l.wq = must(b.bind(p+"attn_q.weight", hp.Embd, q))
		l.wk = must(b.bind(p+"attn_k.weight", hp.Embd, kv))
		l.wv = must(b.bind(p+"attn_v.weight", hp.Embd, kv))
		l.bq = must(b.optional(p+"attn_q.bias", q, 1))
		l.bk = must(b.optional(p+"attn_k.bias", kv, 1))
		l.bv = must(b.optional(p+"attn_v.bias", kv, 1))
		l.wo = must(b.bind(p+"attn_output.weight", q, hp.Embd))
		l.ffnNorm = must(b.bind(p+"ffn_norm.weight", hp.Embd, 1))
		l.gate = must(b.bind(p+"ffn_gate.weight", hp.Embd, hp.FF))
		l.up = must(b.bind(p+"ffn_up.weight", hp.Embd, hp.FF))
		l.down = must(b.bind(p+"ffn_down.weight", hp.FF, hp.Embd))
		if err != nil {
			return nil, err
		}
	}
	w.outNorm = must(b.bind("output_norm.weight", hp.Embd, 1))
	w.ropeFactors = must(b.optional("rope_freqs.weight", hp.RopeDims/2, 1))
	// A model without output.weight ties its output projection to the embedding.
	w.output = must(b.optional("output.weight", hp.Embd, hp.Vocab))
	if w.output == nil {
		w.output = w.tokEmbd
	}
	if err != nil {
		return nil, err
	}
	return w, nil
}
