package tune

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/x448/float16"

	"github.com/vkinfer/vkinfer/attention"
	"github.com/vkinfer/vkinfer/vk"
	"github.com/vkinfer/vkinfer/vk/flashattn"
)

// attnBound is the parity bound of flash attention: the largest error of
// an output row over its largest value (attention.RelErr), as the kernel's
// own tests allow; the reference reads the same f16 K and V.
const attnBound = 1e-3

func (a Attention) String() string {
	if a == (Attention{}) {
		return "policy"
	}
	v := func(n int) string {
		if n == 0 {
			return "auto"
		}
		return fmt.Sprint(n)
	}
	s := fmt.Sprintf("wave %s Br %s Bc %s splits %s", v(a.Wave), v(a.Br), v(a.Bc), v(a.Splits))
	// Heads and staging are named only when set, so the variants that
	// leave them to the policy keep the names earlier reports gave them.
	if a.Heads != 0 {
		s += fmt.Sprintf(" heads %d", a.Heads)
	}
	if a.Stage != "" {
		s += " stage " + a.Stage
	}
	if a.Groups != 0 {
		s += fmt.Sprintf(" groups %d", a.Groups)
	}
	if a.Chunk != 0 {
		s += fmt.Sprintf(" chunk %d", a.Chunk)
	}
	if a.CoopHeads != 0 || a.CoopBc != 0 {
		t := fmt.Sprintf("coopmat tile %v", flashattn.CoopTile{Heads: a.CoopHeads, Bc: a.CoopBc})
		if a == (Attention{CoopHeads: a.CoopHeads, CoopBc: a.CoopBc}) {
			return t // a variant of the matrix units' tile alone
		}
		s += " " + t
	}
	return s
}

// coopAttention lists prefill's variants where the device runs prefill
// attention on the matrix units (as the engine does wherever its products
// take them): the policy, then each tile of the kernel's order. The
// scalar kernel's choices do not reach those batches.
func coopAttention() []Attention {
	vs := []Attention{{}}
	for _, t := range flashattn.CoopTiles() {
		vs = append(vs, Attention{CoopHeads: t.Heads, CoopBc: t.Bc})
	}
	return vs
}

// defaultAttention lists the decode and prefill variants: every wave the
// device runs, keys per step and split-k counts (decode) or keys per tile,
// query rows per workgroup and with and without the policy's split-k
// (prefill: whether splitting a batch's KV range pays when its query
// blocks already make many workgroups is the device's to show). The
// policy's own choice comes first: the reference.
//
// Decode runs its own kernel (flash_attn_decode), whose Bc is the keys a
// workgroup takes per step: its key slots times 1, 2, 4, 8 or 16
// (attention.PlanFor), so what a Bc means depends on the wave and head
// dim. Bc 0 is the policy's for the wave; a Bc the plan rejects for a wave
// is listed as not run, with the plan's reason.
//
// Q-heads per workgroup, staging, and decode's lane groups and load width
// are swept apart from that grid, at the policy's other choices
// (attentionExtras), to keep the sweep short.
func defaultAttention(info vk.DeviceInfo, quick bool) (decode, prefill []Attention) {
	decodeBcs, splits := []int{0, 16, 64, 128}, []int{0, 1, 8, 32, 128, 256}
	prefillBcs, brs, prefillSplits := []int{16, 32, 64}, []int{8, 16}, []int{0, 1}
	if quick {
		decodeBcs, splits = []int{0, 64}, []int{0, 1, 4}
		prefillBcs, prefillSplits = []int{16, 32}, []int{0}
	}
	decode, prefill = []Attention{{}}, []Attention{{}}
	waves := attention.SupportedWaves(flashattn.Device(info))
	for _, w := range waves {
		for _, bc := range decodeBcs {
			for _, s := range splits {
				decode = append(decode, Attention{Wave: w.W, Bc: bc, Splits: s})
			}
		}
		for _, bc := range prefillBcs {
			for _, br := range brs {
				for _, s := range prefillSplits {
					prefill = append(prefill, Attention{Wave: w.W, Br: br, Bc: bc, Splits: s})
				}
			}
		}
	}
	d, p := attentionExtras(waves, quick)
	return append(decode, d...), append(prefill, p...)
}

// attentionExtras lists the variants of the policy's other choices: 1
// and 2 q-heads per workgroup (decode and prefill), staging off (prefill),
// and decode workgroups of 1 to 16 lane groups and with 16-byte loads, at
// every wave, the policy choosing the rest. The policy takes the most
// heads that fit, stages wherever it can, and gives decode 256-lane
// workgroups of 8-byte loads (measured on the H200 only); these show what
// the alternatives cost on the device, RDNA's above all. A heads count
// that does not divide the model's GQA group, or a workgroup the device
// cannot hold, is listed as not run. Quick mode takes one of each kind at
// the policy's wave.
func attentionExtras(waves []attention.WaveChoice, quick bool) (decode, prefill []Attention) {
	if quick {
		return []Attention{{Heads: 1}, {Groups: 2}, {Chunk: 8}}, []Attention{{Stage: StageOff}}
	}
	for _, w := range waves {
		for _, h := range []int{1, 2} {
			decode = append(decode, Attention{Wave: w.W, Heads: h})
			prefill = append(prefill, Attention{Wave: w.W, Heads: h})
		}
		for g := 1; g <= maxGroups; g *= 2 {
			decode = append(decode, Attention{Wave: w.W, Groups: g})
		}
		decode = append(decode, Attention{Wave: w.W, Chunk: 8})
		prefill = append(prefill, Attention{Wave: w.W, Stage: StageOff})
	}
	return decode, prefill
}

// attention sweeps decode (one query at the end of the KV range) and
// prefill (a batch of queries ending there) at each KV length.
func (sw *sweeper) attention(m Model, r *Report, p *Profile) error {
	decode, prefill := defaultAttention(sw.dev.Info(), sw.o.Quick)
	if sw.coopOn() {
		prefill = coopAttention()
	}
	if sw.o.Decode != nil {
		decode = append([]Attention{{}}, sw.o.Decode...)
	}
	if sw.o.Prefill != nil {
		prefill = append([]Attention{{}}, sw.o.Prefill...)
	}
	kvs, queries := []int{4096, 16384}, 512
	if sw.o.Quick {
		kvs, queries = []int{64, 256}, 16
	}
	if sw.o.KVLens != nil {
		kvs = sw.o.KVLens
	}
	if sw.o.Queries != 0 {
		queries = sw.o.Queries
	}
	for _, mode := range []struct {
		name     string
		queries  int
		variants []Attention
		dst      **Attention
	}{{"decode attention", 1, decode, &p.Decode}, {"prefill attention", queries, prefill, &p.Prefill}} {
		var tables []Table
		for _, kv := range kvs {
			t, err := sw.attentionTable(m, mode.name, mode.queries, kv, mode.variants)
			if err != nil {
				return err
			}
			tables = append(tables, t)
		}
		r.Tables = append(r.Tables, tables...)
		if i := choose(tables); i >= 0 {
			a := mode.variants[i]
			*mode.dst = &a
		} else {
			r.Unchosen = append(r.Unchosen, mode.name)
		}
	}
	return nil
}

// attnCase is one attention problem on the device with reference rows.
type attnCase struct {
	sh          flashattn.Shape
	io          flashattn.IO
	bufs        []*vk.Buffer
	rows        []int       // the query rows parity checks
	want        [][]float64 // their reference outputs
	rowFloats   int
	scratchSize int64
}

func (c *attnCase) free() {
	for _, b := range c.bufs {
		b.Free()
	}
}

func (c *attnCase) buffer(d *vk.Device, size int64) (*vk.Buffer, error) {
	b, err := d.NewBuffer((max(size, 4)+3)&^3, false)
	if err == nil {
		c.bufs = append(c.bufs, b)
	}
	return b, err
}

// newAttnCase uploads random q, K and V for queries ending at position kv-1
// and computes the reference output of the first, middle and last query.
func (sw *sweeper) newAttnCase(m Model, queries, kv int) (c *attnCase, err error) {
	rng := rand.New(rand.NewPCG(uint64(queries), uint64(kv)))
	hd, kvd := m.Heads*m.HeadDim, m.KVHeads*m.HeadDim
	c = &attnCase{rowFloats: hd, sh: flashattn.Shape{Queries: queries, Heads: m.Heads, KVHeads: m.KVHeads,
		HeadDim: m.HeadDim, Context: kv, Scale: float32(1 / math.Sqrt(float64(m.HeadDim)))}}
	// c as it is now: an error return sets the result c to nil before
	// deferred calls run.
	defer func(c *attnCase) {
		if err != nil {
			c.free()
		}
	}(c)
	q := make([]float32, queries*hd)
	for i := range q {
		q[i] = float32(2*rng.Float64() - 1)
	}
	kh, vh := make([]uint16, kv*kvd), make([]uint16, kv*kvd)
	for _, h := range [][]uint16{kh, vh} {
		for i := range h {
			h[i] = float16.Fromfloat32(float32(2*rng.Float64() - 1)).Bits()
		}
	}
	pos := kv - queries
	for _, b := range []struct {
		dst  *vk.Binding
		data []byte
	}{{&c.io.Q, f32Bytes(q)}, {&c.io.K, u16Bytes(kh)}, {&c.io.V, u16Bytes(vh)},
		{&c.io.Out, make([]byte, 4*len(q))}, {&c.io.Step, binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, uint32(pos)), 0)}} {
		buf, err := c.buffer(sw.dev, int64(len(b.data)))
		if err != nil {
			return nil, err
		}
		if err := buf.Write(0, b.data); err != nil {
			return nil, err
		}
		*b.dst = vk.Binding{Buf: buf}
	}
	c.rows = []int{0}
	if queries > 1 {
		c.rows = []int{0, queries / 2, queries - 1}
	}
	for _, i := range c.rows {
		want, err := attention.Reference(attention.Problem{Queries: 1, Heads: m.Heads, KVHeads: m.KVHeads,
			HeadDim: m.HeadDim, Pos: pos + i, Scale: float64(c.sh.Scale), Q: q[i*hd : (i+1)*hd], K: kh, V: vh})
		if err != nil {
			return nil, err
		}
		c.want = append(c.want, want)
	}
	return c, nil
}

func (c *attnCase) poison() error {
	nan := binary.LittleEndian.AppendUint32(nil, math.Float32bits(float32(math.NaN())))
	b := make([]byte, c.io.Out.Buf.Size())
	for i := 0; i < len(b); i += 4 {
		copy(b[i:], nan)
	}
	return c.io.Out.Buf.Write(0, b)
}

func (c *attnCase) check() (float64, error) {
	worst := 0.0
	got := make([]float32, c.rowFloats)
	for k, i := range c.rows {
		if err := c.io.Out.Buf.ReadF32(4*int64(i*c.rowFloats), got); err != nil {
			return 0, err
		}
		worst = max(worst, attention.RelErr(got, c.want[k], c.sh.HeadDim))
	}
	return worst, nil
}

// attnWarmUp is how long the device runs the policy back to back on a fresh
// problem before its first cell. Building a problem is seconds of CPU-only
// work at long KV (random K/V, the float64 reference, uploads: ~2 s at KV
// 16384, ~0.5 s at 4096 on the dev machine) while the device idles, longer
// than sw.run's per-cell warm-up covers (20 ms: one or two runs of a
// long prefill). On an H200 the first cell of the 16384-key prefill table,
// the policy (wave 32 Br 16 Bc 16 splits 3), measured 52.9 ms against 11.5
// ms for the same geometry named explicitly two cells later, while at 4096
// keys the two were equal.
const attnWarmUp = 500 * time.Millisecond

// attentionTable measures every variant on one attention problem. Every
// variant runs on the same buffers: the split-k partials of all of them
// share one scratch buffer, allocated with the problem, so nothing is
// allocated or freed between cells; and the device is warmed up on the
// problem before the first cell.
func (sw *sweeper) attentionTable(m Model, kernel string, queries, kv int, vs []Attention) (Table, error) {
	shape := fmt.Sprintf("%d queries at KV %d, %d/%d heads of %d", queries, kv, m.Heads, m.KVHeads, m.HeadDim)
	fail := func(what string, err error) (Table, error) {
		return Table{}, fmt.Errorf("tune: %s %s%s: %w", kernel, shape, what, err)
	}
	c, err := sw.newAttnCase(m, queries, kv)
	if err != nil {
		return fail("", err)
	}
	defer c.free()
	// The kernels' buffers (their dummy bindings) must outlive the runs.
	fas := make([]*flashattn.FlashAttn, len(vs))
	newErrs := make([]error, len(vs))
	for i, v := range vs {
		o := v.Options(0)
		if queries > 1 { // prefill: on the matrix units where the engine's would be
			o.Coop, o.CoopEmulated = sw.coop, sw.o.coopEmulated
		}
		if fas[i], newErrs[i] = flashattn.New(sw.dev, o); newErrs[i] == nil {
			defer fas[i].Close()
		}
	}
	if err := c.allocScratch(sw.dev, fas); err != nil {
		return fail("", err)
	}
	if fas[0] != nil {
		if err := sw.warmUp(kernel, shape, c, fas[0]); err != nil {
			return fail(" warm-up", err)
		}
	}

	t := Table{Kernel: kernel, Shape: shape, Unit: "GB/s", Weight: 1}
	// Decode reads the KV cache once; prefill is counted in flops, 4 per
	// head dim and query-key pair under the causal mask.
	work := 2 * float64(kv) * float64(m.KVHeads*m.HeadDim) * 2
	if queries > 1 {
		t.Unit, work = "GFLOPS", 0
		for i := range queries {
			work += 4 * float64(m.HeadDim*m.Heads) * float64(kv-queries+i+1)
		}
	}
	for i, v := range vs {
		cell := Cell{Variant: v.String(), Ref: v == Attention{}, Default: v == Attention{}, Bound: attnBound}
		if newErrs[i] != nil {
			cell.Status = newErrs[i].Error() // a wave the device cannot run
		} else if err := sw.run(&cell, 1, c.poison, func(s *vk.Sequence) error { return c.record(s, fas[i], v, &cell) }, c.check); err != nil {
			return fail(" "+v.String(), err)
		}
		sw.logCell(kernel, shape, cell)
		t.Cells = append(t.Cells, cell)
	}
	t.finish(work)
	return t, nil
}

// allocScratch allocates the one scratch buffer every variant's split-k
// partials use, sized for the largest (none when no variant splits). A
// variant whose plan fails needs none: its cell reports the error.
func (c *attnCase) allocScratch(d *vk.Device, fas []*flashattn.FlashAttn) error {
	var most int64
	for _, fa := range fas {
		if fa == nil {
			continue
		}
		if n, err := fa.ScratchBytes(c.sh); err == nil {
			most = max(most, n)
		}
	}
	if most == 0 {
		return nil
	}
	b, err := c.buffer(d, most)
	if err != nil {
		return err
	}
	c.io.Scratch = vk.Binding{Buf: b}
	return nil
}

// warmUp runs fa (the first variant: the policy) on the problem back to
// back for attnWarmUp, at least twice, and logs its first and last run: a
// first run far slower than the last shows a device that was idle or cold.
func (sw *sweeper) warmUp(kernel, shape string, c *attnCase, fa *flashattn.FlashAttn) error {
	s := sw.dev.NewSequence()
	defer s.Free()
	if err := fa.Record(s, c.io, c.sh); err != nil {
		return nil // a geometry the device cannot run: its cell says so
	}
	if err := s.End(); err != nil {
		return err
	}
	var first, last float64
	runs := 0
	for start := time.Now(); runs < 2 || time.Since(start) < attnWarmUp; runs++ {
		t0 := time.Now()
		if err := s.Run(); err != nil {
			return err
		}
		last = float64(time.Since(t0).Microseconds()) / 1e3
		if sw.timed {
			last = 0
			for _, t := range s.Timings() {
				last += t.Micros / 1e3
			}
		}
		if runs == 0 {
			first = last
		}
	}
	fmt.Fprintf(sw.o.Log, "tune: %s %s: warm-up %d runs, first %.4f ms, last %.4f ms\n", kernel, shape, runs, first, last)
	return nil
}

// record records variant v (as fa) on the case's buffers; for the policy
// it names the geometry it chose, and where the batch runs on the matrix
// units it takes their parity bound.
func (c *attnCase) record(s *vk.Sequence, fa *flashattn.FlashAttn, v Attention, cell *Cell) error {
	want := flashattn.CoopTile{Heads: v.CoopHeads, Bc: v.CoopBc}
	if cp, err := fa.CoopPlan(c.sh); err == nil {
		cell.Bound = flashattn.CoopRelErr // f16 products
		got := flashattn.CoopTile{Heads: cp.Heads, Bc: cp.Bc}
		// A tile the shape or the device does not take would run another:
		// not this variant.
		if want.Heads != 0 && got.Heads != want.Heads || want.Bc != 0 && got.Bc != want.Bc {
			return fmt.Errorf("coopmat tile %v does not fit this shape (the kernel takes %v)", want, got)
		}
		if v == (Attention{}) {
			cell.Variant = fmt.Sprintf("policy (coopmat tile %v)", got)
		}
		return fa.Record(s, c.io, c.sh)
	} else if want != (flashattn.CoopTile{}) {
		return err
	}
	plan, err := fa.Plan(c.sh)
	if err != nil {
		return err
	}
	if v == (Attention{}) {
		cell.Variant = fmt.Sprintf("policy (wave %d Br %d Bc %d splits %d heads %d%s)",
			plan.Wave.W, plan.Br, plan.Bc, plan.Splits, plan.Heads, planMore(plan))
	}
	return fa.Record(s, c.io, c.sh)
}

// planMore names the rest of a plan for the policy's cell: decode's lane
// groups and load width, prefill's staging (" staged" or nothing).
func planMore(p attention.Plan) string {
	switch {
	case p.Decode():
		return fmt.Sprintf(" groups %d chunk %d", p.Groups, p.Chunk)
	case p.Stage:
		return " staged"
	}
	return ""
}

func f32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func u16Bytes(v []uint16) []byte {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(b[2*i:], x)
	}
	return b
}
