package model

import (
	"fmt"
	"math"

	"github.com/vkinfer/vkinfer/backend"
	"github.com/vkinfer/vkinfer/gguf"
	"github.com/vkinfer/vkinfer/model/tokenizer"
)

// Options configure Load.
type Options struct {
	Context int // KV cache positions; 0 means the model's trained context, capped at 4096
	UBatch  int // prompt tokens per forward program; 0 means 512
	// Seqs is how many sequences the KV cache holds, each in a region of
	// its own (0 means 1): the sessions of NewSessions, which Step decodes
	// together. More than one needs a backend.MultiSeq.
	Seqs     int
	Progress func(done, total uint64)
}

// Model is a loaded model bound to a backend.
type Model struct {
	HP      HParams
	Tok     *tokenizer.Tokenizer
	Context int
	UBatch  int
	Seqs    int // sequences the cache holds (Options.Seqs, at least 1)
	// Cache is the KV cache the model asked the backend for: sliding-window
	// layers keep rings of Window+UBatch-1 positions (Cache.Slots).
	Cache backend.Cache

	arch     arch
	be       backend.Backend
	w        *weights
	programs map[programKey]backend.Program
	// used and uses order the mixed-batch row programs by last use
	// (rowProgram).
	used    map[programKey]int
	uses    int
	out     []float32
	discard []float32
	owner   []*Session // per sequence, the session whose tokens it holds
	// rowToks, rowSeqs and rowPos are a RunRows call's tokens, sequences
	// and positions; batchOut and reused EvalBatch's results.
	rowToks, rowSeqs, rowPos []int32
	batchOut                 []float32
	reused                   []int
}

type programKey struct {
	n    int
	all  bool // logits for every row, not just the last
	rows bool // rows of several sequences (Step, EvalBatch), not n of one
	out  int  // with rows: logits of the first out rows
}

// Load reads the hyper-parameters and tokenizer of f and places its weights
// on be. f must stay open while the model is used (the CPU backend reads
// weights from its mmap).
func Load(f *gguf.File, be backend.Backend, o Options) (*Model, error) {
	hp, err := ReadHParams(f)
	if err != nil {
		return nil, err
	}
	te, ok := f.Tensor("token_embd.weight")
	if !ok {
		return nil, fmt.Errorf("model: tensor %q is missing", "token_embd.weight")
	}
	if len(te.Shape) != 2 || te.Shape[1] > math.MaxInt32 {
		return nil, fmt.Errorf("model: tensor %q has shape %v, want [%d, n_vocab]", te.Name, te.Shape, hp.Embd)
	}
	hp.Vocab = int(te.Shape[1])
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	if tok.VocabSize() > hp.Vocab {
		return nil, fmt.Errorf("model: tokenizer has %d tokens but token_embd.weight only %d rows", tok.VocabSize(), hp.Vocab)
	}
	m := &Model{HP: hp, Tok: tok, arch: archs[hp.Arch], be: be, programs: map[programKey]backend.Program{}, used: map[programKey]int{}}
	m.Context = o.Context
	if m.Context <= 0 {
		m.Context = min(hp.Context, 4096)
	}
	m.UBatch = o.UBatch
	if m.UBatch <= 0 {
		m.UBatch = 512
	}
	m.Seqs = max(1, o.Seqs)
	if _, ok := be.(backend.MultiSeq); m.Seqs > 1 && !ok {
		return nil, fmt.Errorf("model: the %s backend holds one sequence in its KV cache, not %d", be.Name(), m.Seqs)
	}
	m.owner = make([]*Session, m.Seqs)
	m.Cache = backend.Cache{Layers: hp.Layers, Context: m.Context, KVDim: hp.KVHeads * hp.HeadDim,
		Windows: hp.Windows, Batch: m.UBatch, Seqs: m.Seqs}
	var weightBytes uint64
	for _, t := range f.Tensors() {
		weightBytes += t.Bytes
	}
	if err := be.Reserve(weightBytes, m.Cache); err != nil {
		return nil, err
	}
	m.w, err = bindWeights(&binder{f: f, be: be, progress: o.Progress}, hp, m.arch)
	if err != nil {
		return nil, err
	}
	if err := be.InitCache(m.Cache); err != nil {
		return nil, fmt.Errorf("model: KV cache: %w", err)
	}
	return m, nil
}

// Close releases the programs and the backend.
func (m *Model) Close() {
	for _, p := range m.programs {
		p.Close()
	}
	m.programs = nil
	m.be.Close()
}

// Forward runs tokens at positions pos.. of sequence 0 and returns the
// logits of the last token, or of every token when all is set (n_vocab
// values per token). The slice is reused by the next call. Prompts longer
// than UBatch run in pieces. Sequence 0 then holds no session's tokens (its
// session starts again from nothing).
func (m *Model) Forward(tokens []int32, pos int, all bool) ([]float32, error) {
	m.owner[0] = nil
	return m.forward(tokens, 0, pos, all)
}

// forward is Forward into sequence seq's region of the cache.
func (m *Model) forward(tokens []int32, seq, pos int, all bool) ([]float32, error) {
	if len(tokens) == 0 {
		return nil, fmt.Errorf("model: no tokens to evaluate")
	}
	if pos < 0 || pos+len(tokens) > m.Context {
		return nil, fmt.Errorf("model: %d tokens at position %d exceed the context of %d", len(tokens), pos, m.Context)
	}
	rows := 1
	if all {
		rows = len(tokens)
	}
	if cap(m.out) < rows*m.HP.Vocab {
		m.out = make([]float32, rows*m.HP.Vocab)
	}
	out := m.out[:rows*m.HP.Vocab]
	for start := 0; start < len(tokens); start += m.UBatch {
		batch := tokens[start:min(start+m.UBatch, len(tokens))]
		last := start+len(batch) == len(tokens)
		if !all && !last {
			// Only the KV cache matters for all but the last piece, but the
			// program still computes one row of logits; that costs one matvec.
			if err := m.run(batch, seq, pos+start, false, m.scratch()); err != nil {
				return nil, err
			}
			continue
		}
		dst := out
		if all {
			dst = out[start*m.HP.Vocab : (start+len(batch))*m.HP.Vocab]
		}
		if err := m.run(batch, seq, pos+start, all, dst); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// scratch is a logits buffer for pieces whose logits nobody reads.
func (m *Model) scratch() []float32 {
	if len(m.discard) != m.HP.Vocab {
		m.discard = make([]float32, m.HP.Vocab)
	}
	return m.discard
}

// run runs tokens at positions pos.. of sequence seq through one program.
func (m *Model) run(tokens []int32, seq, pos int, all bool, out []float32) error {
	p, err := m.program(len(tokens), all)
	if err != nil {
		return err
	}
	if seq == 0 {
		err = p.Run(tokens, pos, out)
	} else {
		seqs, ps := m.rows(len(tokens))
		for i := range seqs {
			seqs[i], ps[i] = int32(seq), int32(pos+i)
		}
		err = p.RunRows(tokens, seqs, ps, out)
	}
	if err != nil {
		return fmt.Errorf("model: %w", err)
	}
	return nil
}

// rows returns the RunRows buffers of sequences and positions for n rows.
func (m *Model) rows(n int) (seqs, pos []int32) {
	_, seqs, pos = m.rowBuffers(n)
	return seqs, pos
}

// rowBuffers returns the RunRows buffers for n rows.
func (m *Model) rowBuffers(n int) (toks, seqs, pos []int32) {
	if cap(m.rowSeqs) < n {
		m.rowToks, m.rowSeqs, m.rowPos = make([]int32, n), make([]int32, n), make([]int32, n)
	}
	return m.rowToks[:n], m.rowSeqs[:n], m.rowPos[:n]
}

// Prepare records the program Forward runs for a batch of n tokens (1 to
// UBatch; logits of every row when all) without running it. Forward
// records on first use anyway; a backend that only lists what a model's
// passes would build (engine.Plan) is driven by this alone.
func (m *Model) Prepare(n int, all bool) error {
	if n < 1 || n > m.UBatch {
		return fmt.Errorf("model: a batch of %d tokens (want 1 to %d)", n, m.UBatch)
	}
	_, err := m.program(n, all)
	return err
}

// PrepareRows records the program Step runs for n sessions together (2 to
// Seqs: a backend.MultiSeq's row program, one token of each) without
// running it, as Prepare does for Forward's.
func (m *Model) PrepareRows(n int) error {
	if n < 2 || n > m.Seqs {
		return fmt.Errorf("model: a step of %d sequences (want 2 to the %d the cache holds)", n, m.Seqs)
	}
	_, err := m.rowProgram(n, n)
	return err
}

// program returns the recorded program for a batch of n tokens, recording
// it on first use.
func (m *Model) program(n int, all bool) (backend.Program, error) {
	k := programKey{n: n, all: all}
	if p, ok := m.programs[k]; ok {
		return p, nil
	}
	first, out := n-1, 1
	if all {
		first, out = 0, n
	}
	p, err := m.be.Record(n, func(ops backend.Ops) { m.build(ops, n, first, out) })
	if err != nil {
		return nil, fmt.Errorf("model: recording a %d-token forward pass: %w", n, err)
	}
	m.programs[k] = p
	return p, nil
}

// rowProgram returns the recorded row program of n rows with logits for
// the first out (backend.MultiSeq.RecordRows), recording it on first use.
// Programs with out == n (a token of each of n sequences: Step) are kept
// for the model's life; there are at most Seqs of them. Mixed batches
// (EvalBatch: prompts beside decoding sequences) come in any size, so at
// most maxMixed of their programs are kept, the least recently used
// closed first.
func (m *Model) rowProgram(n, out int) (backend.Program, error) {
	k := programKey{n: n, all: true, rows: true, out: out}
	m.uses++
	if p, ok := m.programs[k]; ok {
		m.used[k] = m.uses
		return p, nil
	}
	ms, ok := m.be.(backend.MultiSeq)
	if !ok {
		return nil, fmt.Errorf("model: the %s backend decodes one sequence at a time", m.be.Name())
	}
	if out < n {
		m.evictMixed()
	}
	p, err := ms.RecordRows(n, func(ops backend.Ops) { m.build(ops, n, 0, out) })
	if err != nil {
		return nil, fmt.Errorf("model: recording a forward pass of %d rows: %w", n, err)
	}
	m.programs[k] = p
	if out < n {
		m.used[k] = m.uses
	}
	return p, nil
}

// maxMixed is how many mixed-batch row programs the model keeps: each
// holds the activations of up to UBatch rows, as a prefill program does.
const maxMixed = 2

// dropMixed closes every mixed-batch program.
func (m *Model) dropMixed() {
	for k := range m.used {
		m.programs[k].Close()
		delete(m.programs, k)
		delete(m.used, k)
	}
}

// evictMixed closes the least recently used mixed-batch program when
// maxMixed are kept.
func (m *Model) evictMixed() {
	if len(m.used) < maxMixed {
		return
	}
	var old programKey
	first := true
	for k, u := range m.used {
		if first || u < m.used[old] {
			old, first = k, false
		}
	}
	m.programs[old].Close()
	delete(m.programs, old)
	delete(m.used, old)
}

// build records the forward pass for n tokens: llama's, with what
// m.arch and the bound weights add (biases, Q/K head norms, post-branch
// norms, GeGLU, the embedding scale, per-layer windows and RoPE bases, a
// mixture of experts for the FFN). Its output is the logits of rows
// first … first+out-1.
func (m *Model) build(ops backend.Ops, n, first, out int) {
	hp, w, a := m.HP, m.w, m.arch
	q, kv := hp.Heads*hp.HeadDim, hp.KVHeads*hp.HeadDim
	x := ops.Tensor(n, hp.Embd)
	h := ops.Tensor(n, hp.Embd)
	qt, kt, vt := ops.Tensor(n, q), ops.Tensor(n, kv), ops.Tensor(n, kv)
	att := ops.Tensor(n, q)
	var gate, up backend.Tensor
	var router, ids, mix, eGate, eUp, eDown backend.Tensor
	if a.moe {
		k := hp.ExpertsUsed
		router, ids, mix = ops.Tensor(n, hp.Experts), ops.Tensor(n, k), ops.Tensor(n, k)
		eGate, eUp, eDown = ops.Tensor(n*k, hp.ExpertFF), ops.Tensor(n*k, hp.ExpertFF), ops.Tensor(n*k, hp.Embd)
	} else {
		gate, up = ops.Tensor(n, hp.FF), ops.Tensor(n, hp.FF)
	}
	rope := func(layer, heads int) backend.RoPE {
		base, scale := hp.Rope(layer)
		return backend.RoPE{Heads: heads, HeadDim: hp.HeadDim, Dims: hp.RopeDims, NeoX: hp.RopeNeoX,
			Base: base, Scale: scale, Factors: w.ropeFactors}
	}
	glu := ops.SwiGLU
	if hp.GELU {
		glu = ops.GeGLU
	}
	// branch adds the projection p·in to the residual x, through the
	// branch's post-norm where the architecture has one. Either way the
	// residual add rides on the op before it (the product, or the norm):
	// in decode each op is mostly launch and barrier latency.
	branch := func(p, in, postNorm backend.Tensor) {
		if postNorm == nil {
			ops.MatMulAdd(x, p, in, x)
			return
		}
		ops.MatMul(h, p, in)
		ops.RMSNormAdd(x, h, postNorm, x, hp.Eps)
	}

	ops.Embed(x, w.tokEmbd)
	if a.embedScale {
		ops.Scale(x, float32(math.Sqrt(float64(hp.Embd))))
	}
	for i, l := range w.layers {
		ops.RMSNorm(h, x, l.attnNorm, hp.Eps)
		for _, p := range []struct{ dst, w, b backend.Tensor }{{qt, l.wq, l.bq}, {kt, l.wk, l.bk}, {vt, l.wv, l.bv}} {
			ops.MatMul(p.dst, p.w, h)
			if p.b != nil {
				ops.AddBias(p.dst, p.b)
			}
		}
		if l.qNorm != nil {
			ops.HeadNorm(qt, l.qNorm, hp.HeadDim, hp.Eps)
			ops.HeadNorm(kt, l.kNorm, hp.HeadDim, hp.Eps)
		}
		ops.RoPE(qt, rope(i, hp.Heads))
		kr := rope(i, hp.KVHeads)
		ops.StoreKV(i, kt, vt, &kr)
		ops.Attend(att, qt, i, backend.Attention{Heads: hp.Heads, KVHeads: hp.KVHeads, HeadDim: hp.HeadDim,
			Scale: hp.AttnScale, Window: hp.Window(i)})
		branch(l.wo, att, l.postAttnNorm)

		ops.RMSNorm(h, x, l.ffnNorm, hp.Eps)
		if a.moe {
			// Each token's FFN is the weighted sum of its chosen experts'
			// SwiGLU FFNs, one row per (token, chosen expert) slot.
			ops.Route(ids, mix, router, l.router, h, hp.ExpertsUsed, hp.ExpertNorm)
			ops.MatMulID(eGate, l.gateExps, h, ids)
			ops.MatMulID(eUp, l.upExps, h, ids)
			glu(eGate, eGate, eUp)
			ops.MatMulID(eDown, l.downExps, eGate, ids)
			ops.MoESum(x, eDown, mix, x)
			continue
		}
		ops.MatMul(gate, l.gate, h)
		ops.MatMul(up, l.up, h)
		glu(gate, gate, up)
		branch(l.down, gate, l.postFFNNorm)
	}
	if out < n {
		sel := ops.Tensor(out, hp.Embd)
		ops.CopyRows(sel, x, first)
		x = sel
	}
	ops.RMSNorm(x, x, w.outNorm, hp.Eps)
	logits := ops.Tensor(out, hp.Vocab)
	ops.MatMul(logits, w.output, x)
	ops.Output(logits)
}
