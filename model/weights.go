package model

import (
	"fmt"
	"slices"

	"github.com/vkinfer/vkinfer/backend"
	"github.com/vkinfer/vkinfer/gguf"
)

// layer holds the weights of one transformer block. Biases are nil when the
// file has none (llama); qwen2 has q/k/v biases. The norms an architecture
// lacks (arch.headNorms, arch.postNorms) are nil.
type layer struct {
	attnNorm, wq, wk, wv, wo backend.Tensor
	bq, bk, bv               backend.Tensor
	qNorm, kNorm             backend.Tensor
	postAttnNorm             backend.Tensor
	ffnNorm, gate, up, down  backend.Tensor
	postFFNNorm              backend.Tensor
	// A mixture-of-experts FFN (arch.moe) has a router instead of gate,
	// up and down, and each expert's gate, up and down matrices stacked
	// in one weight (backend.Ops.MatMulID).
	router, gateExps, upExps, downExps backend.Tensor
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
	bound    map[string]bool // tensors placed, for the check that none is left over
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

// experts binds a stack of n experts' matrices, GGML shape [cols, rows, n],
// as one weight of n·rows rows: expert e's rows follow expert e-1's.
func (b *binder) experts(name string, cols, rows, n int) (backend.Tensor, error) {
	t, ok := b.f.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("model: tensor %q is missing", name)
	}
	parts, err := b.placeShaped(t, []uint64{uint64(cols), uint64(rows), uint64(n)}, cols, rows*n)
	if err != nil {
		return nil, err
	}
	return parts[0], nil
}

func (b *binder) place(t *gguf.Tensor, cols, rows int) (backend.Tensor, error) {
	parts, err := b.placeSplit(t, cols, rows)
	if err != nil {
		return nil, err
	}
	return parts[0], nil
}

// split binds tensor name, of cols×Σrows values, as one weight per entry
// of rows, each its own range of consecutive rows: a fused tensor (Phi-3's
// attn_qkv, ffn_up holding gate then up) becomes the separate weights the
// forward pass multiplies by. A row of a GGUF tensor is contiguous, so each
// part is a byte range of the file and no backend knows about fusion.
func (b *binder) split(name string, cols int, rows ...int) ([]backend.Tensor, error) {
	t, ok := b.f.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("model: tensor %q is missing", name)
	}
	return b.placeSplit(t, cols, rows...)
}

func (b *binder) placeSplit(t *gguf.Tensor, cols int, rows ...int) ([]backend.Tensor, error) {
	total := 0
	for _, r := range rows {
		total += r
	}
	want := []uint64{uint64(cols), uint64(total)}
	if total == 1 {
		want = want[:1]
	}
	return b.placeShaped(t, want, cols, rows...)
}

// placeShaped checks that t has GGML shape want and places it as one
// weight per entry of rows, each its own range of rows of cols values.
func (b *binder) placeShaped(t *gguf.Tensor, want []uint64, cols int, rows ...int) ([]backend.Tensor, error) {
	if !sameShape(t.Shape, want) {
		return nil, fmt.Errorf("model: tensor %q has shape %v, want %v", t.Name, t.Shape, want)
	}
	if !t.Type.Supported() {
		return nil, fmt.Errorf("model: tensor %q: unsupported tensor type %s", t.Name, t.Type)
	}
	rb, err := t.Type.RowBytes(cols)
	if err != nil {
		return nil, fmt.Errorf("model: tensor %q: %w", t.Name, err)
	}
	data := b.f.Data(t)
	parts := make([]backend.Tensor, len(rows))
	first := 0
	for i, r := range rows {
		name := t.Name
		if len(rows) > 1 {
			name = fmt.Sprintf("%s[rows %d:%d]", t.Name, first, first+r)
		}
		var part []byte
		if data != nil { // a header (gguf.Header) has no tensor data
			part = data[first*rb : (first+r)*rb]
		}
		if parts[i], err = b.be.Weight(name, t.Type, r, cols, part); err != nil {
			return nil, fmt.Errorf("model: %w", err)
		}
		first += r
	}
	b.bound[t.Name] = true
	b.done += t.Bytes
	if b.progress != nil {
		b.progress(b.done, b.total)
	}
	return parts, nil
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

func bindWeights(b *binder, hp HParams, a arch) (*weights, error) {
	for _, t := range b.f.Tensors() {
		b.total += t.Bytes
	}
	b.bound = map[string]bool{}
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
	// mustIf binds a tensor the architecture has (when on) and leaves nil otherwise.
	mustIf := func(on bool, name string, cols, rows int) backend.Tensor {
		if !on {
			return nil
		}
		return must(b.bind(name, cols, rows))
	}
	// parts splits a fused tensor into its row ranges.
	parts := func(name string, cols int, rows ...int) []backend.Tensor {
		ts, e := b.split(name, cols, rows...)
		if e != nil {
			if err == nil {
				err = e
			}
			return make([]backend.Tensor, len(rows))
		}
		return ts
	}
	w.tokEmbd = must(b.bind("token_embd.weight", hp.Embd, hp.Vocab))
	for i := range w.layers {
		l := &w.layers[i]
		p := fmt.Sprintf("blk.%d.", i)
		l.attnNorm = must(b.bind(p+"attn_norm.weight", hp.Embd, 1))
		if _, fused := b.f.Tensor(p + "attn_qkv.weight"); fused {
			qkv := parts(p+"attn_qkv.weight", hp.Embd, q, kv, kv)
			l.wq, l.wk, l.wv = qkv[0], qkv[1], qkv[2]
		} else {
			l.wq = must(b.bind(p+"attn_q.weight", hp.Embd, q))
			l.wk = must(b.bind(p+"attn_k.weight", hp.Embd, kv))
			l.wv = must(b.bind(p+"attn_v.weight", hp.Embd, kv))
		}
		l.bq = must(b.optional(p+"attn_q.bias", q, 1))
		l.bk = must(b.optional(p+"attn_k.bias", kv, 1))
		l.bv = must(b.optional(p+"attn_v.bias", kv, 1))
		l.qNorm = mustIf(a.headNorms, p+"attn_q_norm.weight", hp.HeadDim, 1)
		l.kNorm = mustIf(a.headNorms, p+"attn_k_norm.weight", hp.HeadDim, 1)
		l.wo = must(b.bind(p+"attn_output.weight", q, hp.Embd))
		l.postAttnNorm = mustIf(a.postNorms, p+"post_attention_norm.weight", hp.Embd, 1)
		l.ffnNorm = must(b.bind(p+"ffn_norm.weight", hp.Embd, 1))
		switch {
		case a.moe:
			l.router = must(b.bind(p+"ffn_gate_inp.weight", hp.Embd, hp.Experts))
			l.gateExps = must(b.experts(p+"ffn_gate_exps.weight", hp.Embd, hp.ExpertFF, hp.Experts))
			l.upExps = must(b.experts(p+"ffn_up_exps.weight", hp.Embd, hp.ExpertFF, hp.Experts))
			l.downExps = must(b.experts(p+"ffn_down_exps.weight", hp.ExpertFF, hp.Embd, hp.Experts))
		case a.fusedGateUp:
			gu := parts(p+"ffn_up.weight", hp.Embd, hp.FF, hp.FF)
			l.gate, l.up = gu[0], gu[1]
			l.down = must(b.bind(p+"ffn_down.weight", hp.FF, hp.Embd))
		default:
			l.gate = must(b.bind(p+"ffn_gate.weight", hp.Embd, hp.FF))
			l.up = must(b.bind(p+"ffn_up.weight", hp.Embd, hp.FF))
			l.down = must(b.bind(p+"ffn_down.weight", hp.FF, hp.Embd))
		}
		l.postFFNNorm = mustIf(a.postNorms, p+"post_ffw_norm.weight", hp.Embd, 1)
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
	// A tensor the forward pass does not read (a bias of a fused attn_qkv,
	// Phi-3's long-context rope factors, another architecture's norms)
	// means a variant it does not implement: refuse rather than compute
	// something else, as llama.cpp refuses a file with tensors it did not
	// create.
	for _, t := range b.f.Tensors() {
		if !b.bound[t.Name] {
			return nil, fmt.Errorf("model: tensor %q is not used by the %s architecture (an unsupported variant)", t.Name, hp.Arch)
		}
	}
	return w, nil
}
