// Package backend defines the op interface the model architecture is written
// against. A backend (the CPU reference in backend/cpu, the Vulkan one in vk)
// implements it; the model never sees which one runs.
//
// The forward pass is recorded once per batch shape into a Program and then
// replayed for every call with new token ids and a new start position. This is
// what lets the Vulkan backend record a command buffer once and resubmit it:
// nothing in a recording depends on the token values or the position, and no
// value is read back until the program's outputs.
package backend

import (
	"fmt"

	"github.com/vkinfer/vkinfer/quant"
)

// Tensor is an opaque handle to a backend-owned 2-D tensor of Rows() rows of
// Cols() contiguous values. Activations are f32; weights keep their GGUF type.
type Tensor interface {
	Rows() int
	Cols() int
}

// RoPE describes rotary position embedding for one tensor of heads.
type RoPE struct {
	Heads   int     // heads in the tensor (the row holds Heads*HeadDim values)
	HeadDim int     // values per head
	Dims    int     // leading dims of each head that rotate (rope.dimension_count)
	NeoX    bool    // rotate pairs (i, i+Dims/2) instead of adjacent pairs (2i, 2i+1)
	Base    float32 // rope.freq_base
	Scale   float32 // position multiplier (1/linear scaling factor); 1 when unscaled
	Factors Tensor  // optional per-frequency divisors (rope_freqs.weight, Dims/2 values), or nil
}

// Attention describes causal multi-head attention with grouped KV heads.
type Attention struct {
	Heads   int     // query heads
	KVHeads int     // key/value heads; Heads is a multiple of KVHeads
	HeadDim int     // values per head
	Scale   float32 // multiplies q·k, usually 1/sqrt(HeadDim)
	// Window is 0 for attention over every earlier position, or W > 0 for
	// a sliding window: the row at position p sees keys p-W+1 … p only
	// (masked where p_query - p_key >= W, llama.cpp's
	// LLAMA_SWA_TYPE_STANDARD). The layer's cache must keep at least
	// W-1+N slots (Cache.Slots) when it is a ring.
	Window int
}

// Ops records the operations of a forward pass over a batch of N tokens at
// positions pos..pos+N-1, where the token ids and pos are supplied at Run time
// (or of N sequences, a token each, in a program from MultiSeq.RecordRows:
// then row i's position and sequence are those RunRows gives it wherever a
// comment below says pos+i). Shapes are fixed at record time. dst may not
// alias an input unless stated.
type Ops interface {
	// Tensor allocates an f32 activation of rows×cols owned by the program.
	Tensor(rows, cols int) Tensor
	// Embed sets dst[i] = table[token_i] (dequantized).
	Embed(dst, table Tensor)
	// RMSNorm sets dst[i] = x[i] / sqrt(mean(x[i]²) + eps) * w. dst may be x.
	RMSNorm(dst, x, w Tensor, eps float32)
	// RMSNormAdd sets dst = r + RMSNorm(x)·w, row by row, r shaped like x:
	// a branch's post-norm followed by its residual add (Gemma 3's
	// post_attention_norm and post_ffw_norm), recorded as one op so a
	// backend can do both in one pass instead of two dependent ones. Each
	// value is the f32 sum r + (x·scale·w), rounded as RMSNorm then Add
	// would. dst may be x or r.
	RMSNormAdd(dst, x, w, r Tensor, eps float32)
	// MatMul sets dst[i][r] = Σ_k w[r][k]·x[i][k]: w is rows×K, x is N×K, dst is N×rows.
	MatMul(dst, w, x Tensor)
	// MatMulAdd sets dst = r + MatMul(w, x), r shaped like dst: the
	// projection that feeds a residual connection. dst may be r.
	MatMulAdd(dst, w, x, r Tensor)
	// AddBias adds the 1-row tensor b to every row of x, in place.
	AddBias(x, b Tensor)
	// Add sets dst = a + b elementwise. dst may be a or b.
	Add(dst, a, b Tensor)
	// RoPE rotates x in place; row i is at position pos+i.
	RoPE(x Tensor, p RoPE)
	// StoreKV writes k and v (N × KVHeads*HeadDim) into the layer's cache at
	// pos..pos+N-1, k rotated by rope first where rope is not nil (a backend
	// may fuse the two, or the store with the products that made k and v;
	// k's and v's own contents are unspecified afterwards).
	StoreKV(layer int, k, v Tensor, rope *RoPE)
	// Attend computes causal attention of q (N × Heads*HeadDim) over the layer's
	// cache positions 0..pos+i for row i, writing N × Heads*HeadDim to dst.
	Attend(dst, q Tensor, layer int, a Attention)
	// HeadNorm normalises x in place per head: every consecutive run of
	// headDim values of every row (a row holds heads·headDim values) is
	// replaced by its RMS norm, run / sqrt(mean(run²) + eps), times w
	// (headDim values). Qwen3 and Gemma 3 apply it to Q and K before RoPE.
	HeadNorm(x, w Tensor, headDim int, eps float32)
	// SwiGLU sets dst = silu(gate) * up. dst may be gate. up's contents are
	// unspecified afterwards (a backend may fuse the op with the products
	// that made gate and up, and never write up).
	SwiGLU(dst, gate, up Tensor)
	// GeGLU sets dst = gelu(gate) * up with ggml_gelu's tanh form,
	// gelu(x) = 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))). dst may be
	// gate; up's contents are unspecified afterwards, as for SwiGLU.
	GeGLU(dst, gate, up Tensor)
	// Scale multiplies x by s in place.
	Scale(x Tensor, s float32)
	// Route computes a router's logits = w·x (N × E for E experts, as
	// MatMul) and picks each token's experts from them as llama.cpp's
	// build_moe_ffn does with softmax gating: p =
	// softmax(logits[i]); ids[i] (N × k) receives the k experts of highest
	// p in descending order (ties to the lower index) and weights[i] (N × k)
	// their probabilities, divided by their sum (clamped below at
	// 6.103515625e-5) when norm. Expert indexes are stored as f32 values
	// (exact integers); only MatMulID reads them.
	Route(ids, weights, logits, w, x Tensor, k int, norm bool)
	// MatMulID is the matrix product of a mixture of experts (llama.cpp's
	// mul_mat_id): w stacks E experts' matrices of R rows × K (E·R rows;
	// expert e's row r is row e·R+r, the layout of a GGUF [K, R, E]
	// tensor), ids is Route's N × k, dst is (N·k) × R with
	// dst[i·k+j] = W_ids[i][j] · x_ij, where x_ij is x[i] when x has N rows
	// (every expert of a token reads its one input) and x[i·k+j] when it
	// has N·k (each slot its own). Only the chosen experts' rows are read.
	MatMulID(dst, w, x, ids Tensor)
	// MoESum sets dst[i] = (Σ_j weights[i][j]·y[i·k+j]) + r[i]: the
	// experts' outputs y ((N·k) × C) mixed by Route's weights (N × k),
	// each product rounded to f32 and summed in slot order, then added to
	// the residual r (N × C), as llama.cpp orders them. dst may be r.
	MoESum(dst, y, weights, r Tensor)
	// CopyRows sets dst = x[first : first+dst.Rows()].
	CopyRows(dst, x Tensor, first int)
	// Output marks t to be read back by Program.Run, in the order of the calls.
	Output(t Tensor)
}

// Program is a recorded forward pass for a fixed batch size.
type Program interface {
	// Run executes the pass for tokens (len == the recorded batch size) at
	// positions pos.. of sequence 0 and copies each Output tensor, in
	// order, into out, which must hold the sum of their sizes.
	Run(tokens []int32, pos int, out []float32) error
	// RunRows executes the pass with row i being token tokens[i] of
	// sequence seqs[i] at position pos[i], each of the three as long as
	// the recorded batch. A program from Record takes rows of one sequence
	// at consecutive positions (Run is the case of sequence 0); one from
	// MultiSeq.RecordRows takes rows of any sequences at any positions
	// that Cache.CheckRows allows.
	RunRows(tokens, seqs, pos []int32, out []float32) error
	// Close releases the program's activations.
	Close()
}

// MultiSeq is a backend whose KV cache holds several sequences
// (Cache.Seqs) that one forward pass decodes together.
type MultiSeq interface {
	Backend
	// RecordRows builds a program for a batch of n rows, each a token of
	// a sequence at a position, both given per run (Program.RunRows):
	// RoPE rotates row i at its position, StoreKV writes it into its
	// sequence's region, Attend makes it attend over its sequence's keys
	// up to its position, those the same run stores included. The matrix
	// products see n rows, so several sequences decode for little more
	// than one, and the prompts of several sequences (rows of one sequence
	// at consecutive positions, Cache.CheckRows) prefill in one pass.
	RecordRows(n int, build func(Ops)) (Program, error)
}

// Cache describes the KV cache a backend keeps for a model.
//
// It holds Sequences() sequences, each in its own region of every layer's
// cache: Slots(l) positions of layer l per sequence, sequence s in slots
// s·Slots(l) … (s+1)·Slots(l)-1, its ring (below) within its own region.
//
// A layer with a sliding window keeps only the positions its attention can
// still see, as a ring: position p lives in slot p mod Slots(layer). A batch
// of n <= Batch tokens at pos writes pos … pos+n-1 and its first row reads
// keys from pos-W+1, a span of W-1+n <= Slots positions, so no slot a batch
// reads is overwritten by the same batch. A global layer is the case
// Slots == Context of the same mapping.
type Cache struct {
	Layers  int
	Context int // positions
	KVDim   int // KVHeads*HeadDim per position for both K and V
	// Windows holds each layer's attention window (Attention.Window); nil,
	// or 0 for a layer, means global attention.
	Windows []int
	// Batch is the most tokens one program runs (the ubatch). It sizes the
	// rings of sliding layers; 0 means Context (no ring is smaller than the
	// context).
	Batch int
	// Seqs is the number of sequences the cache holds, each in a region
	// of its own; 0 means 1.
	Seqs int
}

// Sequences is the number of sequences the cache holds (Seqs, at least 1).
func (c Cache) Sequences() int { return max(1, c.Seqs) }

// Window is layer l's attention window, 0 for a global layer.
func (c Cache) Window(l int) int {
	if l < len(c.Windows) {
		return c.Windows[l]
	}
	return 0
}

// Slots is the number of positions layer l keeps: Context for a global
// layer, min(Context, Window+Batch-1) for a sliding one.
func (c Cache) Slots(l int) int {
	w, batch := c.Window(l), c.Batch
	if batch <= 0 {
		batch = c.Context
	}
	if w <= 0 {
		return c.Context
	}
	return min(c.Context, w+batch-1)
}

// TotalSlots is Σ_l Slots(l), the positions the cache holds for one
// sequence: the whole cache is Sequences()·TotalSlots·KVDim values for K
// and as many for V.
func (c Cache) TotalSlots() int {
	n := 0
	for l := range c.Layers {
		n += c.Slots(l)
	}
	return n
}

// Check validates the shape of c for every backend.
func (c Cache) Check() error {
	if c.Layers <= 0 || c.Context <= 0 || c.KVDim <= 0 || c.Batch < 0 || c.Seqs < 0 {
		return fmt.Errorf("invalid KV cache shape: %d layers, context %d, %d values per position, batch %d, %d sequences",
			c.Layers, c.Context, c.KVDim, c.Batch, c.Seqs)
	}
	if c.Windows != nil && len(c.Windows) != c.Layers {
		return fmt.Errorf("invalid KV cache shape: %d attention windows for %d layers", len(c.Windows), c.Layers)
	}
	for l, w := range c.Windows {
		if w < 0 {
			return fmt.Errorf("invalid KV cache shape: layer %d has attention window %d", l, w)
		}
	}
	return nil
}

// span is the most positions apart two rows of one sequence in one batch
// may be: Batch, or the context without one.
func (c Cache) span() int {
	if c.Batch <= 0 {
		return c.Context
	}
	return c.Batch
}

// MaxRows is the most rows a row program (MultiSeq.RecordRows) may take:
// a token of each sequence, or a batch's worth.
func (c Cache) MaxRows() int { return max(c.Sequences(), c.span()) }

// PerSeq is the most rows of one sequence a batch of n rows holds: all n
// in a program of one sequence's tokens, at most a batch's in a row
// program (CheckRows). CheckWindow takes it.
func (c Cache) PerSeq(n int, rows bool) int {
	if rows {
		return min(n, c.span())
	}
	return n
}

// CheckWindow says whether a batch of n tokens can attend over layer l's
// cache with attention window w (0: global): a ring (Slots < Context) must
// belong to a sliding layer and hold the W-1+n positions the batch reads.
func (c Cache) CheckWindow(l, n, w int) error {
	s := c.Slots(l)
	switch {
	case w < 0:
		return fmt.Errorf("layer %d: attention window %d", l, w)
	case s < c.Context && w == 0:
		return fmt.Errorf("layer %d: global attention over a cache that keeps only %d of %d positions", l, s, c.Context)
	case s < c.Context && w-1+n > s:
		return fmt.Errorf("layer %d: a batch of %d tokens with window %d needs %d cache slots, the ring has %d", l, n, w, w-1+n, s)
	}
	return nil
}

// Backend places weights, owns the KV cache and records programs.
type Backend interface {
	// Name is a short label for reports ("CPU", "Vulkan").
	Name() string
	// Reserve is told, before any Weight call, how many bytes of weights
	// will follow and the KV cache that InitCache will ask for, so a device
	// backend can refuse a model that does not fit, naming both sizes.
	Reserve(weightBytes uint64, c Cache) error
	// Weight places a GGUF tensor of rows×cols values of type t whose bytes
	// are data (borrowed from the mmap for the duration of the call or longer).
	Weight(name string, t quant.Type, rows, cols int, data []byte) (Tensor, error)
	// InitCache allocates (or reallocates) the KV cache.
	InitCache(c Cache) error
	// Record builds a program for a batch of n tokens.
	Record(n int, build func(Ops)) (Program, error)
	// Close releases everything the backend holds.
	Close()
}

// CheckWeight validates the arguments of Backend.Weight for every backend
// and returns the bytes of one row.
func CheckWeight(name string, t quant.Type, rows, cols int, data []byte) (rowBytes int, err error) {
	if !t.Supported() {
		return 0, fmt.Errorf("tensor %q: unsupported tensor type %s", name, t)
	}
	rb, err := t.RowBytes(cols)
	if err != nil {
		return 0, fmt.Errorf("tensor %q: %w", name, err)
	}
	if rows < 1 || len(data) != rb*rows {
		return 0, fmt.Errorf("tensor %q: %d bytes for %d×%d %s, want %d", name, len(data), rows, cols, t, rb*rows)
	}
	return rb, nil
}

// CheckRows validates the rows of a RunRows call for every backend: n
// tokens, sequences and positions; each sequence one the cache holds and
// each position inside the context. rows says what the program was
// recorded for: rows of several sequences at their own positions
// (MultiSeq.RecordRows), or else the tokens of one sequence at consecutive
// positions (Record). Rows of one sequence in a row program must be at
// distinct positions less than Batch apart: the span a ring keeps free for
// one batch (see Cache), so no row's store lands in a slot another row of
// the batch reads.
func (c Cache) CheckRows(n int, rows bool, tokens, seqs, pos []int32) error {
	if len(tokens) != n || len(seqs) != n || len(pos) != n {
		return fmt.Errorf("program recorded for %d rows, run with %d tokens, %d sequences and %d positions", n, len(tokens), len(seqs), len(pos))
	}
	span := c.span()
	for i := range n {
		s, p := int(seqs[i]), int(pos[i])
		switch {
		case s < 0 || s >= c.Sequences():
			return fmt.Errorf("row %d: sequence %d, the cache holds %d", i, s, c.Sequences())
		case p < 0 || p >= c.Context:
			return fmt.Errorf("row %d: position %d outside the context of %d", i, p, c.Context)
		case !rows && (s != int(seqs[0]) || p != int(pos[0])+i):
			return fmt.Errorf("row %d: sequence %d at position %d in a program for the consecutive tokens of one sequence (sequence %d from position %d)",
				i, s, p, seqs[0], pos[0])
		}
		if !rows {
			continue
		}
		// Pairwise rather than through a map: a run allocates nothing.
		for j := range i {
			if seqs[j] != seqs[i] {
				continue
			}
			if d := pos[i] - pos[j]; d == 0 || d >= int32(span) || -d >= int32(span) {
				return fmt.Errorf("rows %d and %d: sequence %d at positions %d and %d (rows of one sequence need distinct positions less than %d apart)",
					j, i, s, pos[j], p, span)
			}
		}
	}
	return nil
}
