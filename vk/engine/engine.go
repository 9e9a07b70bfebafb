// Package engine is the Vulkan backend: it implements backend.Backend by
// recording the model's ops as kernel dispatches into a vk.Sequence that is
// replayed for every forward pass with new token ids and a new position.
package engine

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/vkinfer/vkinfer/attention"
	"github.com/vkinfer/vkinfer/backend"
	"github.com/vkinfer/vkinfer/coopmat"
	"github.com/vkinfer/vkinfer/quant"
	"github.com/vkinfer/vkinfer/tune"
	"github.com/vkinfer/vkinfer/vk"
	"github.com/vkinfer/vkinfer/vk/flashattn"
	"github.com/vkinfer/vkinfer/vk/kernels"
)

// Options configure the engine.
type Options struct {
	OwnDevice bool // close the device with the engine
	Profile   bool // time every dispatch; see Profile
	// Wave is the flash-attention lane group and the subgroup size the
	// matrix-vector products require: 0 picks the device's defaults
	// (attention.Wave: 32 on RDNA, 64 on GCN, native elsewhere;
	// attention.MatVecWave: 32 on RDNA, the driver's elsewhere), or 32 / 64
	// (the products keep the driver's size where the device cannot pin it).
	Wave int
	// PlainAttention uses the simple causal kernel instead of flash
	// attention (llama-bench's -fa 0).
	PlainAttention bool
	// IntDot decides whether matrix products round their activations to 8
	// bits and use integer dot products (kernels.HasQ8 weights): nil takes
	// the device's default (kernels.DefaultQ8, where the packed dot product
	// is native), else on or off.
	IntDot *bool
	// CoopMat decides whether prefill matrix products run on cooperative
	// matrices (VK_KHR_cooperative_matrix): nil takes the policy's choice
	// (coopmat.Choose, CoopMatChoice), else on or off; on fails where the
	// policy finds the device unable.
	CoopMat *bool
	// CoopInt8 runs the prefill products whose weights the integer
	// variant takes (kernels.HasCoopInt8) on it: 8-bit activations times
	// the weights' quants on int8 fragments (--coopmat int8). Off by
	// default: it is not measured faster than the f16 products yet. New
	// fails where cooperative matrices are off or the device has no
	// usable 8-bit shape (coopmat.Int8Shape) or no shaderInt8.
	CoopInt8 bool
	// NarrowCoop runs the products of batches of 9 to 64 columns (many
	// sequences decoding together, short prompts) on matvec_coopmat, where
	// cooperative matrices are on (kernels.Kernels.NarrowCoop): nil takes
	// the policy's choice (kernels.DefaultNarrowCoop), else on or off.
	NarrowCoop *bool
	// Tune holds measured kernel geometry for this device (infer tune);
	// nil keeps the built-in defaults. A non-zero Wave still wins over
	// its flash-attention wave.
	Tune *tune.Profile
	// Warn receives one-line warnings: a tuning profile's attention
	// choices that do not fit the model. Nil discards them.
	Warn io.Writer
	// Unfuse turns decode fusions off (all are on by default), to
	// measure what each is worth; the environment variable
	// VKINFER_UNFUSE (ParseFusions' names) adds to it.
	Unfuse Fusion
}

// Engine is the Vulkan backend.
type Engine struct {
	dev   *vk.Device
	o     Options
	prof  map[string]*OpStat
	k     *kernels.Kernels
	fa    *flashattn.FlashAttn // decode (one query)
	faPre *flashattn.FlashAttn // prefill: tuned apart (Br, no forced split-k)
	// The policy's decode and prefill attention at the same waves, for
	// shapes the profile's choices do not fit (made when first needed).
	faPolicy [2]*flashattn.FlashAttn
	weights  arena
	cache    backend.Cache
	kc, vc   []*vk.Buffer // per layer f16 [Sequences][Slots(l)][KVDim]
	// q8Weights: some weight takes 8-bit activations, so kernels writing
	// activations also write their 8-bit copies.
	q8Weights bool
	// normQ8: every weight that reads a norm's output beside another
	// product takes 8-bit activations (normReader), so norms may fold.
	normQ8 bool
	// weightRefs are the uploaded weights by their binding's buffer and
	// offset, for the waterfall's bytes and layers (profiling only).
	weightRefs map[vk.Binding]weightRef
	// lastToken is the waterfall of the latest profiled decode token.
	lastToken *Waterfall
	// memLimit, when not 0, caps the free memory Reserve sees: tests set
	// it (LimitMemory) to stand for a smaller device than the one at hand.
	memLimit uint64
}

// New builds the backend on an open device.
func New(dev *vk.Device, o Options) (*Engine, error) {
	if env := os.Getenv("VKINFER_UNFUSE"); env != "" {
		f, err := ParseFusions(env)
		if err != nil {
			return nil, fmt.Errorf("VKINFER_UNFUSE: %w", err)
		}
		o.Unfuse |= f
	}
	k := kernels.New(dev)
	o.Tune.ApplyKernels(k)
	// The products' wave: --wave, else a tuning profile's measured shape,
	// else the policy's.
	mv := attention.MatVecWave(flashattn.Device(dev.Info()), o.Wave)
	if o.Wave != 0 || o.Tune == nil || o.Tune.MatVec == nil {
		k.MatVec.Wave = mv
	}
	if o.Wave != 0 || o.Tune == nil || o.Tune.MatVecQ8 == nil {
		k.MatVecQ8.Wave = mv
	}
	for _, sh := range []kernels.MatVecShape{k.MatVec, k.MatVecQ8} {
		// Lanes 0 (sized by the matrix) are sized in whole subgroups.
		if sh.Wave != 0 && sh.Lanes%sh.Wave != 0 {
			k.Close()
			return nil, fmt.Errorf("vulkan: matrix-vector products of %d lanes (%v) cannot run on whole subgroups of %d", sh.Lanes, sh, sh.Wave)
		}
	}
	if o.IntDot != nil {
		if *o.IntDot && !dev.Info().IntegerDot {
			k.Close()
			return nil, fmt.Errorf("vulkan: integer dot products asked for, but %s lacks the feature", dev.Info().Name)
		}
		k.Q8 = *o.IntDot
	}
	cm, err := coopMatFor(dev.Info(), o.CoopMat)
	if err != nil {
		k.Close()
		return nil, err
	}
	k.CoopMat = cm
	if o.CoopInt8 {
		if err := coopInt8For(dev.Info(), cm); err != nil {
			k.Close()
			return nil, err
		}
		k.CoopInt8 = true
	}
	k.NarrowCoop = kernels.DefaultNarrowCoop(dev.Info().VendorID)
	if o.NarrowCoop != nil {
		k.NarrowCoop = *o.NarrowCoop
	}
	decode, prefill := o.Tune.FlashAttn(o.Wave)
	// Prefill attention takes the matrix units with the products: the
	// same choice, so --coopmat off turns both off.
	prefill.Coop = cm
	fa, err := flashattn.New(dev, decode)
	if err != nil {
		k.Close()
		return nil, err
	}
	faPre, err := flashattn.New(dev, prefill)
	if err != nil {
		fa.Close()
		k.Close()
		return nil, err
	}
	dev.SetProfiling(o.Profile)
	e := &Engine{dev: dev, o: o, k: k, fa: fa, faPre: faPre, prof: map[string]*OpStat{}, normQ8: true}
	e.weights = arena{dev: dev, chunk: chunkSize(dev.Info())}
	return e, nil
}

// IntDot reports whether matrix products take 8-bit activations (for the
// weight types that have the integer path).
func (e *Engine) IntDot() bool { return e.k.Q8 }

// CoopMat is the cooperative-matrix choice the prefill products use; off
// (zero shapes, with the reason) keeps the scalar kernels.
func (e *Engine) CoopMat() coopmat.Choice { return e.k.CoopMat }

// CoopInt8 reports whether the prefill products whose weights take it run
// the integer cooperative-matrix variant (Options.CoopInt8).
func (e *Engine) CoopInt8() bool { return e.k.CoopInt8 }

// NarrowCoop reports whether the products of 9 to 64 columns run on
// matvec_coopmat (Options.NarrowCoop, on devices whose products take the
// matrix units).
func (e *Engine) NarrowCoop() bool { return e.k.NarrowCoop && e.k.CoopMat.On() }

// MatVecWave is the subgroup size the matrix-vector products require (of
// f32 and of 8-bit activations), 0 for the driver's choice.
func (e *Engine) MatVecWave() (f32, q8 int) { return e.k.MatVec.Wave, e.k.MatVecQ8.Wave }

// Wave reports the flash-attention lane group in use and the hardware
// subgroup size it runs with (smaller when the lane group is emulated across
// several subgroups).
func (e *Engine) Wave() (requested, subgroup int) {
	w := e.fa.Wave()
	return w.W, w.Subgroup
}

// flashFor is the flash attention of a batch of shape sh: the tuned one
// for its mode (decode or prefill), or, where the tuning profile's choices
// do not fit sh (a profile measures one model's shapes: 4 q-heads per
// workgroup cannot serve a GQA group of 7), the policy's at the same wave,
// with a warning. Without a profile a shape the policy cannot plan is an
// error.
func (e *Engine) flashFor(sh flashattn.Shape) (*flashattn.FlashAttn, error) {
	mode, name := 0, "decode"
	fa := e.fa
	if sh.Queries > 1 && !sh.Rows { // rows of their own sequences decode
		mode, name, fa = 1, "prefill", e.faPre
	}
	_, err := fa.Plan(sh)
	if err == nil || e.o.Tune == nil {
		return fa, err
	}
	if e.faPolicy[mode] == nil {
		policy, perr := flashattn.New(e.dev, flashattn.Options{Wave: fa.Wave().W})
		if perr != nil {
			return nil, perr
		}
		if _, perr := policy.Plan(sh); perr != nil {
			policy.Close()
			return nil, err
		}
		e.faPolicy[mode] = policy
		if e.o.Warn != nil {
			fmt.Fprintf(e.o.Warn, "warning: the tuning profile's %s attention does not fit this model (%v); using the built-in choice\n", name, err)
		}
	}
	return e.faPolicy[mode], nil
}

// Tuning is the tuning profile in use; nil means the built-in defaults.
func (e *Engine) Tuning() *tune.Profile { return e.o.Tune }

// Device is the device the engine runs on.
func (e *Engine) Device() *vk.Device { return e.dev }

// Name implements backend.Backend.
func (e *Engine) Name() string {
	i := e.dev.Info()
	return fmt.Sprintf("Vulkan (%s, %s)", i.Name, i.Driver)
}

// Reserve implements backend.Backend: refuse a device that cannot run work
// (a driver's null device) or a model that cannot fit in the device's local
// memory, before uploading anything.
func (e *Engine) Reserve(weightBytes uint64, c backend.Cache) error {
	if err := e.dev.CanRun(); err != nil {
		return err
	}
	kv := kvBytes(c)
	// Activations of a 512-token prompt program and alignment slack: a
	// rough allowance, small beside the weights of any real model.
	scratch := weightBytes/20 + 64<<20
	need := weightBytes + kv + scratch
	free := e.localBudget()
	if need > free {
		return fmt.Errorf("vulkan: the model needs %s (weights %s + KV cache %s at context %d%s%s + scratch %s) but %s has %s of device memory free",
			bytes(need), bytes(weightBytes), bytes(kv), c.Context, rings(c), seqs(c), bytes(scratch), e.dev.Info().Name, bytes(free))
	}
	e.weights.left = int64(weightBytes)
	return nil
}

// rings describes the sliding-window layers of c for the memory error, ""
// when every layer keeps the whole context.
func rings(c backend.Cache) string {
	n := 0
	for l := range c.Layers {
		if c.Slots(l) < c.Context {
			n++
		}
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(", %d of %d layers in sliding-window rings: %d positions in all", n, c.Layers, c.TotalSlots())
}

// seqs names the sequences of c for the memory error, "" for one.
func seqs(c backend.Cache) string {
	if c.Sequences() == 1 {
		return ""
	}
	return fmt.Sprintf(" for each of %d sequences", c.Sequences())
}

// localBudget is the free memory of the largest device-local heap, at
// most memLimit when that is set.
func (e *Engine) localBudget() uint64 {
	var best uint64
	for _, h := range e.dev.Info().Heaps {
		if h.DeviceLocal && h.Budget > best {
			best = h.Budget
		}
	}
	if e.memLimit > 0 {
		best = min(best, e.memLimit)
	}
	return best
}

// kvBytes is the size of the KV cache: K and V in f16 for every slot of
// every layer (a sliding layer keeps only its ring).
func kvBytes(c backend.Cache) uint64 {
	return 2 * 2 * uint64(c.Sequences()) * uint64(c.TotalSlots()) * uint64(c.KVDim)
}

// Weight implements backend.Backend: the GGUF bytes are uploaded unchanged
// (kernels dequantize on the fly) into the weight arena.
func (e *Engine) Weight(name string, t quant.Type, rows, cols int, data []byte) (backend.Tensor, error) {
	if _, err := backend.CheckWeight(name, t, rows, cols, data); err != nil {
		return nil, err
	}
	b, err := e.weights.upload(data, stackRoom(name, int64(len(data))))
	if err != nil {
		return nil, fmt.Errorf("tensor %q: %w", name, err)
	}
	e.q8Weights = e.q8Weights || e.k.UseQ8(t)
	e.normQ8 = e.normQ8 && normQ8(e.k, name, t)
	if e.o.Profile {
		if e.weightRefs == nil {
			e.weightRefs = map[vk.Binding]weightRef{}
		}
		e.weightRefs[vk.Binding{Buf: b.Buf, Off: b.Off}] = weightRef{layer: weightLayer(name), bytes: int64(len(data))}
	}
	return &tensor{rows: rows, cols: cols, typ: t, b: b}, nil
}

// plainAttention says whether attention of shape a runs the plain kernel:
// when asked for, or for head dims flash attention does not take. It
// takes multiples of 8 up to 256 (every real checkpoint); anything else,
// such as llama-2-tiny-random's 4, runs the plain kernel.
func (e *Engine) plainAttention(a backend.Attention) bool {
	return e.o.PlainAttention || a.HeadDim%8 != 0 || a.HeadDim > 256
}

// InitCache implements backend.Backend.
func (e *Engine) InitCache(c backend.Cache) error {
	if err := checkCache(c); err != nil {
		return err
	}
	e.freeCache()
	e.cache = c
	for l := range c.Layers {
		// A sliding layer keeps only its ring (Cache.Slots), one per
		// sequence: sequence s's region starts at row s·Slots(l).
		size := 2 * int64(c.Sequences()) * int64(c.Slots(l)) * int64(c.KVDim)
		for _, list := range []*[]*vk.Buffer{&e.kc, &e.vc} {
			b, err := e.dev.NewBuffer(size, false)
			if err != nil {
				e.freeCache()
				return fmt.Errorf("vulkan: KV cache: %w", err)
			}
			*list = append(*list, b)
		}
	}
	return nil
}

func checkCache(c backend.Cache) error {
	if err := c.Check(); err != nil {
		return fmt.Errorf("vulkan: %w", err)
	}
	if c.KVDim%2 != 0 {
		return fmt.Errorf("vulkan: invalid KV cache shape %+v", c)
	}
	return nil
}

func (e *Engine) freeCache() {
	for _, b := range append(e.kc, e.vc...) {
		b.Free()
	}
	e.kc, e.vc = nil, nil
}

// Record implements backend.Backend.
func (e *Engine) Record(n int, build func(backend.Ops)) (backend.Program, error) {
	return e.record(n, false, build)
}

// RecordRows implements backend.MultiSeq: the decode kernels in their row
// mode (a (position, sequence) table in the step buffer, written by each
// RunRows), so one recording serves any sequences at any positions.
func (e *Engine) RecordRows(n int, build func(backend.Ops)) (backend.Program, error) {
	return e.record(n, true, build)
}

func (e *Engine) record(n int, rows bool, build func(backend.Ops)) (backend.Program, error) {
	if err := checkRecord(n, rows, e.cache, e.kc != nil); err != nil {
		return nil, err
	}
	var p *program
	var err error
	// Recording builds the pipelines the program is the first to use.
	vk.WithoutGC(func() {
		if p, err = newProgram(e, n, rows); err != nil {
			return
		}
		build(p)
		if err = p.finish(); err != nil {
			p.Close()
		}
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// checkRecord validates a recording of n rows (with rows, of sequences at
// their own positions) over cache c, ready once InitCache has run: the
// engine's and the plan's alike.
func checkRecord(n int, rows bool, c backend.Cache, ready bool) error {
	switch {
	case n <= 0:
		return fmt.Errorf("vulkan: batch of %d tokens", n)
	case !ready:
		return fmt.Errorf("vulkan: Record before InitCache")
	case rows && n > c.MaxRows():
		return fmt.Errorf("vulkan: a row program of %d rows, at most %d (the cache's sequences or its batch)", n, c.MaxRows())
	}
	return nil
}

// Close implements backend.Backend.
func (e *Engine) Close() {
	e.freeCache()
	e.weights.free()
	e.k.Close()
	e.fa.Close()
	e.faPre.Close()
	for _, fa := range e.faPolicy {
		if fa != nil {
			fa.Close()
		}
	}
	if e.o.OwnDevice {
		e.dev.Close()
	}
}

func bytes(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
}

// stackRoom is the room a weight should leave after itself in its arena
// chunk: the first weight of a product stack (attn_q, or the q rows of a
// fused attn_qkv; ffn_gate, or the gate rows of a fused ffn_up) is placed
// where the products that follow it fit too (k and v have at most q's rows,
// up gate's), so that the stacked product can address them through one
// binding (kernels.MatVecStack; a stack that would cross a chunk records
// its products apart).
func stackRoom(name string, size int64) int64 {
	switch {
	case strings.HasSuffix(name, ".attn_q.weight") || strings.Contains(name, ".attn_qkv.weight[rows 0:"):
		return 2 * (size + align)
	case strings.HasSuffix(name, ".ffn_gate.weight") || strings.Contains(name, ".ffn_up.weight[rows 0:"):
		return size + align
	}
	return 0
}

// fuser returns the decode fusions' gatherer for programs of n tokens.
func (e *Engine) fuser(n int, sameBuffer func(a, b *tensor) bool) fuser {
	return fuser{k: e.k, on: fuseAll &^ e.o.Unfuse, n: n, sameBuffer: sameBuffer}
}
