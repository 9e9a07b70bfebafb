// Package flashattn records the flash-attention kernels
// (shaders/glsl/flash_attn.comp for query tiles, flash_attn_decode.comp for
// one query per workgroup, flash_attn_reduce.comp for prefill's split-k,
// and flash_attn_coopmat.comp, prefill on the matrix units, where
// Options.Coop allows it)
// into a *vk.Sequence, with the geometry package attention chooses for the
// device.
//
// Like the other kernels it records and never waits: the caller puts
// s.Barrier() between dependent dispatches (before Record, so q and the KV
// cache are written, and after it, before out is read). Record adds the
// barrier between the two passes of a split prefill; split decode merges in
// its one dispatch. Values that change per replay (the
// position pos) come from the step buffer, so one recording serves every
// token; the split-k workgroup count is fixed at record time from the
// context size, and each split finds its share of the KV range at run time.
package flashattn

import (
	"fmt"
	"sync"

	"github.com/vkinfer/vkinfer/attention"
	"github.com/vkinfer/vkinfer/coopmat"
	"github.com/vkinfer/vkinfer/shaders"
	"github.com/vkinfer/vkinfer/vk"
	"github.com/vkinfer/vkinfer/vk/kernels"
)

// Shape is one attention op: Queries rows of q, f32 [Queries][Heads*HeadDim],
// at positions pos..pos+Queries-1 attending causally over the f16 K and V
// caches [Context][KVHeads*HeadDim]; query head h reads KV head
// h/(Heads/KVHeads). The output has q's layout.
//
// The caches are rings (kernels.StoreKV writes them so): the key at
// position k is row k mod Context, so Context is the layer's slots
// (backend.Cache.Slots), the whole context for a global layer. The row at
// position p sees the keys at p-Window+1 .. p, or 0 .. p without a window,
// and never a position the ring no longer holds after the batch was stored
// (before pos+Queries-Context): attention.Problem.First.
type Shape struct {
	Queries, Heads, KVHeads, HeadDim int
	Context                          int // rows of the caches, at least Queries
	// Window, when above 0, limits each query to the Window latest keys (a
	// sliding-window layer, llama.cpp's standard kind: the key at k is
	// masked for the query at p when p-k >= Window); 0 is causal over all.
	Window int
	Scale  float32 // multiplies q·k, usually 1/sqrt(HeadDim)
	// Mask adds an f16 mask [Queries][Context] to the scores (-Inf excludes a
	// key; a key's entry is in its cache row's column) on top of the causal
	// mask and the window.
	Mask bool
	// Rows: each query is one token of a sequence of its own (the server's
	// batched decode), and IO.Step holds a (position, sequence) pair per
	// query (kernels.AppendRowTable). K and V then hold Seqs regions of Context
	// rows, sequence s's ring in rows s·Context …, and each query sees
	// its own sequence's keys up to its position. Only the decode kernel
	// runs it, without a mask; Context need not reach Queries.
	Rows bool
	Seqs int // regions of the caches, with Rows
}

// policy is the plan's view of a shape. The KV length that steers split-k
// is the most keys a workgroup walks: the whole cache, or with a window
// the keys of a batch's rows, Window+Queries-1 (split decode shares only
// the window).
func (s Shape) policy() attention.Shape {
	kv := s.Context
	if s.Window > 0 {
		kv = min(kv, s.Window+s.Queries-1)
	}
	if s.Rows {
		// A row sees its own sequence's keys, one query's worth; the
		// policy wants a KV length no shorter than its queries.
		kv = s.Context
		if s.Window > 0 {
			kv = min(kv, s.Window)
		}
		kv = max(kv, s.Queries)
	}
	return attention.Shape{Queries: s.Queries, Heads: s.Heads, KVHeads: s.KVHeads,
		HeadDim: s.HeadDim, KVLen: kv, Mask: s.Mask}
}

// push is the kernels' push constants (flash_attn.glsl's Push).
func (s Shape) push() []byte {
	return vk.Push(uint32(s.Queries), uint32(s.Heads), uint32(s.KVHeads), uint32(s.Context), s.Scale, uint32(s.Window))
}

// pushBytes is the size of flash_attn.glsl's push constants.
const pushBytes = 24

// IO holds the buffers of one Record.
type IO struct {
	Q, K, V, Out vk.Binding
	// Step holds uint32 pos, then the sequence whose region of K and V
	// (Context rows from row seq·Context) the keys are in; with Shape.Rows
	// a (position, sequence) pair per query (kernels.AppendRowTable).
	Step vk.Binding
	Mask vk.Binding // f16 [Queries][Context], when Shape.Mask
	// Scratch holds the split-k partials when the plan splits: at least
	// ScratchBytes(shape) bytes. Records in one sequence may share it: the
	// barriers between dependent ops already order them.
	Scratch vk.Binding
	// Q8, when its Buf is set, receives Out in the 8-bit layout of
	// kernels.QuantizeQ8 as well, written by the split merge or by the
	// decode kernel itself; only where WritesQ8 says so.
	Q8 vk.Binding
}

// WritesQ8 says whether Record fills IO.Q8 for sh: in decode, whose kernel
// rounds its output (or its split merge does), and with split-k, whose
// reduce pass does; for head dims in whole blocks of 32, and never where
// the cooperative-matrix kernel runs.
func (f *FlashAttn) WritesQ8(sh Shape) bool {
	if _, err := f.CoopPlan(sh); err == nil {
		return false
	}
	p, err := f.Plan(sh)
	return err == nil && writesQ8(p, sh)
}

// writesQ8 is WritesQ8 for the plan p of sh.
func writesQ8(p attention.Plan, sh Shape) bool {
	return (p.Splits > 1 || p.Decode()) && sh.HeadDim%32 == 0
}

// Options choose the lane-group width and override the policy.
type Options struct {
	Wave  int             // 0 = the device's default (attention.Wave), or 32 / 64
	Prefs attention.Prefs // zero fields are chosen per shape by attention.PlanFor
	// Coop, when on, runs prefill batches of CoopMinQueries or more on the
	// matrix units (flash_attn_coopmat.comp, see CoopPlan) with its
	// fragment shape and subgroup size; the device must have
	// VK_KHR_cooperative_matrix enabled. Other shapes, and decode, run the
	// scalar kernels.
	Coop coopmat.Choice
	// CoopEmulated runs the same kernel built against the software
	// emulation of the fragment operations (flash_attn_coopmat_emu.comp)
	// on any device with f16 arithmetic: for checking the kernel where the
	// extension is missing (lavapipe in CI). It takes precedence over Coop.
	CoopEmulated bool
	// CoopTile is the cooperative-matrix kernel's tile to try first (a
	// tuning profile's): q-heads per workgroup and keys per tile, 0 for
	// either leaving it to CoopPlan's order. A shape or device it does not
	// fit takes the order's first that fits.
	CoopTile CoopTile
}

// FlashAttn records flash attention on one device.
type FlashAttn struct {
	d     *vk.Device
	info  vk.DeviceInfo
	dev   attention.Device
	wave  attention.WaveChoice
	prefs attention.Prefs
	mu    sync.Mutex
	pipes map[pipeKey]*vk.Pipeline
	// Split decode's counters, one per workgroup column, zero between
	// dispatches (the last split resets its own). Each Record takes its
	// own from the last block (used counts the words taken from it), so
	// recordings that run without a barrier between them never share one.
	counts []*vk.Buffer
	used   int

	// The cooperative-matrix kernel (coop.go): Options.Coop,
	// CoopEmulated and CoopTile.
	coop     coopmat.Choice
	coopEmu  bool
	coopTile CoopTile
}

type pipeKey struct {
	name string
	sg   int
	spec [16]uint32
}

// Device converts the runtime's device report into the policy's view.
func Device(info vk.DeviceInfo) attention.Device {
	return attention.Device{
		VendorID: info.VendorID, DeviceID: info.DeviceID, Name: info.Name, Driver: info.Driver,
		SubgroupSize: info.SubgroupSize, MinSubgroupSize: info.MinSubgroupSize,
		MaxSubgroupSize: info.MaxSubgroupSize, SizeControl: info.SizeControl,
		SharedMemory: info.SharedMemory, MaxWorkgroupInvocations: info.MaxWorkgroupInvocations,
		ComputeUnits: info.ComputeUnits,
	}
}

// New prepares flash attention for d. It fails when o.Wave cannot run on the
// device even by emulation; the error lists the waves it supports.
func New(d *vk.Device, o Options) (*FlashAttn, error) {
	dev := Device(d.Info())
	w, err := attention.ChooseWave(dev, o.Wave)
	if err != nil {
		return nil, fmt.Errorf("flashattn: %w", err)
	}
	return &FlashAttn{d: d, info: d.Info(), dev: dev, wave: w, prefs: o.Prefs, coop: o.Coop, coopEmu: o.CoopEmulated,
		coopTile: o.CoopTile, pipes: map[pipeKey]*vk.Pipeline{}}, nil
}

// Close frees the split counters Record allocated. Pipelines belong to the
// device.
func (f *FlashAttn) Close() {
	for _, b := range f.counts {
		b.Free()
	}
}

// countBlock is the size of a block of split counters in words: 64 KiB,
// a model's decode records for many sequences.
const countBlock = 16384

// counters takes n zeroed split counters for one Record.
func (f *FlashAttn) counters(n int) (vk.Binding, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	// Offsets stay aligned for any device's storage bindings (256 bytes).
	n = (n + 63) &^ 63
	if len(f.counts) == 0 || f.used+n > countBlock {
		words := max(n, countBlock)
		b, err := f.d.NewBuffer(4*int64(words), false)
		if err != nil {
			return vk.Binding{}, fmt.Errorf("flashattn: split counters: %w", err)
		}
		if err := b.Write(0, make([]byte, 4*words)); err != nil {
			b.Free()
			return vk.Binding{}, fmt.Errorf("flashattn: split counters: %w", err)
		}
		f.counts, f.used = append(f.counts, b), 0
	}
	c := vk.Binding{Buf: f.counts[len(f.counts)-1], Off: 4 * int64(f.used), Size: 4 * int64(n)}
	f.used += n
	return c, nil
}

// Wave is the lane-group width in use and how it maps onto the hardware.
func (f *FlashAttn) Wave() attention.WaveChoice { return f.wave }

// Plan is the geometry Record uses for a shape.
func (f *FlashAttn) Plan(sh Shape) (attention.Plan, error) {
	if err := sh.check(); err != nil {
		return attention.Plan{}, err
	}
	prefs := f.prefs
	if sh.Rows {
		prefs.Br = 1 // one workgroup column per query: flash_attn_decode.comp
	}
	return attention.PlanFor(f.dev, f.wave, sh.policy(), prefs)
}

// check rejects what no kernel runs: a negative window, and a ring
// shorter than the batch (its rows would overwrite one another).
func (s Shape) check() error {
	if s.Rows {
		if s.Window < 0 || s.Context < 1 || s.Seqs < 1 || s.Mask {
			return fmt.Errorf("flashattn: %d rows of their own sequences: window %d, %d sequences of %d rows, mask %v (none is taken)",
				s.Queries, s.Window, s.Seqs, s.Context, s.Mask)
		}
		return nil
	}
	if s.Window < 0 || s.Context < s.Queries {
		return fmt.Errorf("flashattn: window %d, %d queries over a cache of %d rows", s.Window, s.Queries, s.Context)
	}
	return nil
}

// ScratchBytes is the size of IO.Scratch a shape needs: 0 without split-k.
func (f *FlashAttn) ScratchBytes(sh Shape) (int64, error) {
	p, err := f.Plan(sh)
	if err != nil {
		return 0, err
	}
	o, ml := scratchLayout(p, sh)
	return o + ml, nil
}

// scratchLayout sizes the partial outputs [split][Queries][Heads][HeadDim]
// and the (m, l) pairs that follow them, at an offset every device accepts
// for a storage binding (minStorageBufferOffsetAlignment is at most 256).
func scratchLayout(p attention.Plan, sh Shape) (o, ml int64) {
	if p.Splits == 1 {
		return 0, 0
	}
	rows := int64(p.Splits) * int64(sh.Queries) * int64(sh.Heads)
	return (rows*int64(sh.HeadDim)*4 + 255) &^ 255, rows * 8
}

// Record records attention for sh into s: one dispatch, or for a split
// prefill the split pass, a barrier and the reduce pass. Where CoopPlan
// accepts sh (and no 8-bit output is asked for), the one dispatch is the
// cooperative-matrix kernel's.
func (f *FlashAttn) Record(s *vk.Sequence, io IO, sh Shape) error {
	if cp, ok := f.coopRuns(sh, io.Q8.Buf != nil); ok {
		return f.recordCoop(s, io, sh, cp)
	}
	p, err := f.Plan(sh)
	if err != nil {
		return fmt.Errorf("flashattn: %w", err)
	}
	info := f.d.Info()
	gx, gy, gz := p.Workgroups(sh.policy())
	if lim := info.MaxWorkgroupCount; gx > int(lim[0]) || gy > int(lim[1]) || gz > int(lim[2]) ||
		sh.Queries > int(lim[1]) || sh.Heads > int(lim[0]) {
		return fmt.Errorf("flashattn: %d×%d×%d workgroups exceed the device's grid %v", gx, gy, gz, lim)
	}
	qBytes := 4 * int64(sh.Queries) * int64(sh.Heads*sh.HeadDim)
	cache := 2 * int64(sh.Context) * int64(sh.KVHeads*sh.HeadDim)
	step := int64(8) // the first position and the sequence
	if sh.Rows {
		cache *= int64(sh.Seqs)
		step = 8 * int64(sh.Queries)
	}
	type check struct {
		what string
		b    vk.Binding
		n    int64
	}
	checks := []check{{"q", io.Q, qBytes}, {"k", io.K, cache}, {"v", io.V, cache}, {"out", io.Out, qBytes}, {"step", io.Step, step}}
	// A binding the variant declares and never touches gets one of the
	// dispatch's own buffers: q where it would read, out where it would
	// write. A shared stand-in would tie unrelated dispatches together in
	// the synchronization validation, which goes by declared accesses.
	if sh.Mask {
		checks = append(checks, check{"mask", io.Mask, (2*int64(sh.Queries)*int64(sh.Context) + 3) &^ 3})
	} else {
		io.Mask = io.Q
	}
	oBytes, mlBytes := scratchLayout(p, sh)
	if p.Splits > 1 {
		checks = append(checks, check{"scratch", io.Scratch, oBytes + mlBytes})
	}
	q8 := io.Q8.Buf != nil
	if q8 {
		if !writesQ8(p, sh) {
			return fmt.Errorf("flashattn: an 8-bit output needs decode or split-k, and head dims in blocks of 32 (plan %v, head dim %d)", p, sh.HeadDim)
		}
		checks = append(checks, check{"q8", io.Q8, kernels.Q8Bytes(sh.Queries, sh.Heads*sh.HeadDim)})
	} else {
		io.Q8 = io.Out
	}
	for _, c := range checks {
		if err := need(c.what, c.b, c.n); err != nil {
			return err
		}
	}

	main, err := f.mainPipeline(p, q8, sh.Rows)
	if err != nil {
		return err
	}
	bindings := main.Bindings()
	pushMain := sh.push()
	if p.Splits == 1 {
		bind := []vk.Binding{io.Q, io.K, io.V, io.Mask, io.Step, io.Out, io.Out, io.Out, io.Q8, io.Out}
		s.Dispatch(main, bind[:bindings], pushMain, uint32(gx), uint32(gy), uint32(gz))
		return nil
	}
	part := vk.Binding{Buf: io.Scratch.Buf, Off: io.Scratch.Off, Size: oBytes}
	ml := vk.Binding{Buf: io.Scratch.Buf, Off: io.Scratch.Off + oBytes, Size: mlBytes}
	if p.Decode() {
		counts, err := f.counters(gx * gy)
		if err != nil {
			return err
		}
		s.Dispatch(main, []vk.Binding{io.Q, io.K, io.V, io.Mask, io.Step, part, ml, io.Out, io.Q8, counts},
			pushMain, uint32(gx), uint32(gy), uint32(gz))
		return nil
	}
	reduce, err := f.pipeline(reduceSpec(sh.HeadDim, q8))
	if err != nil {
		return err
	}
	s.Dispatch(main, []vk.Binding{io.Q, io.K, io.V, io.Mask, io.Step, part, ml},
		pushMain, uint32(gx), uint32(gy), uint32(gz))
	s.Barrier()
	s.Dispatch(reduce, []vk.Binding{part, ml, io.Out, io.Q8},
		vk.Push(uint32(sh.Queries), uint32(sh.Heads), uint32(p.Splits)),
		uint32(sh.Heads), uint32(sh.Queries), 1)
	return nil
}

// pipeline returns the memoised pipeline of s.
func (f *FlashAttn) pipeline(s vk.PipelineSpec) (*vk.Pipeline, error) {
	key := pipeKey{name: s.Name, sg: s.SubgroupSize}
	copy(key.spec[:], s.Spec)
	f.mu.Lock()
	defer f.mu.Unlock()
	if p, ok := f.pipes[key]; ok {
		return p, nil
	}
	p, err := f.d.Pipeline(s)
	if err != nil {
		return nil, fmt.Errorf("flashattn: pipeline %s %v: %w", s.Name, s.Spec, err)
	}
	f.pipes[key] = p
	return p, nil
}

// spec describes the pipeline of a shader with its specialization
// constants; w.Require pins the hardware subgroup size.
func spec(name string, bindings, pushSize int, w attention.WaveChoice, constants ...uint32) vk.PipelineSpec {
	sg := 0
	if w.Require {
		sg = w.Subgroup
	}
	return vk.PipelineSpec{Name: name, SPIRV: shaders.SPIRV(name), Bindings: bindings, PushSize: pushSize,
		Spec: constants, SubgroupSize: sg}
}

// mainSpec is the plan's kernel with flash_attn.glsl's 7 bindings, and in
// decode the split merge's 3 more; rows is Shape.Rows (decode only).
func mainSpec(p attention.Plan, q8, rows bool) vk.PipelineSpec {
	bindings := 7
	if p.Decode() {
		bindings = 10
	}
	constants := []uint32{uint32(p.HeadDim), uint32(p.Lanes()), uint32(p.Wave.Subgroup), uint32(p.Br), uint32(p.Heads),
		uint32(p.Bc), uint32(p.Slots), uint32(p.Chunk), b32(p.Mask), b32(p.Splits > 1), b32(p.Stage), b32(q8), uint32(max(p.MergeHeads, 1))}
	if p.Decode() {
		constants = append(constants, b32(rows))
	}
	return spec(p.Shader(), bindings, pushBytes, p.Wave, constants...)
}

// reduceSpec is the merge pass of a split prefill, with the 8-bit output
// when q8.
func reduceSpec(headDim int, q8 bool) vk.PipelineSpec {
	return spec("flash_attn_reduce", 4, 12, attention.WaveChoice{}, uint32(headDim), b32(q8))
}

// Specs are the pipelines Record builds for sh, with the 8-bit output when
// q8 (as Record with IO.Q8 set): the cooperative-matrix kernel where it
// runs, else the plan's kernel, and for a split prefill the merge pass.
// Listing them builds nothing.
func (f *FlashAttn) Specs(sh Shape, q8 bool) ([]vk.PipelineSpec, error) {
	if cp, ok := f.coopRuns(sh, q8); ok {
		return []vk.PipelineSpec{coopSpec(cp)}, nil
	}
	p, err := f.Plan(sh)
	if err != nil {
		return nil, fmt.Errorf("flashattn: %w", err)
	}
	specs := []vk.PipelineSpec{mainSpec(p, q8, sh.Rows)}
	if p.Splits > 1 && !p.Decode() {
		specs = append(specs, reduceSpec(sh.HeadDim, q8))
	}
	return specs, nil
}

// b32 is a boolean specialization constant.
func b32(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

// need checks a binding (see vk.Binding.Check) with the package's prefix.
func need(what string, b vk.Binding, n int64) error {
	if err := b.Check(what, n); err != nil {
		return fmt.Errorf("flashattn: %w", err)
	}
	return nil
}
