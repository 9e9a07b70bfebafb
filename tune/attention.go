package tune

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"

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
	return fmt.Sprintf("wave %s Br %s Bc %s splits %s", v(a.Wave), v(a.Br), v(a.Bc), v(a.Splits))
}

// defaultAttention lists the decode and prefill variants: every wave the
// device runs, keys per tile, and split-k counts (decode) or query rows per
// workgroup (prefill). The policy's own choice comes first: the reference.
func defaultAttention(info vk.DeviceInfo, quick bool) (decode, prefill []Attention) {
	bcs, splits, brs := []int{16, 32, 64}, []int{0, 1, 8, 32, 128, 256}, []int{8, 16}
	if quick {
		bcs, splits = []int{16, 32}, []int{0, 1, 4}
	}
	decode, prefill = []Attention{{}}, []Attention{{}}
	for _, w := range attention.SupportedWaves(flashattn.Device(info)) {
		for _, bc := range bcs {
			for _, s := range splits {
				decode = append(decode, Attention{Wave: w.W, Bc: bc, Splits: s})
			}
			for _, br := range brs {
				prefill = append(prefill, Attention{Wave: w.W, Br: br, Bc: bc})
			}
		}
	}
	return decode, prefill
}

// attention sweeps decode (one query at the end of the KV range) and
// prefill (a batch of queries ending there) at each KV length.
func (sw *sweeper) attention(m Model, r *Report, p *Profile) error {
	decode, prefill := defaultAttention(sw.dev.Info(), sw.o.Quick)
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
	defer func() {
		if err != nil {
			c.free()
		}
	}()
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
		{&c.io.Out, make([]byte, 4*len(q))}, {&c.io.Step, binary.LittleEndian.AppendUint32(nil, uint32(pos))}} {
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

// attentionTable measures every variant on one attention problem.
func (sw *sweeper) attentionTable(m Model, kernel string, queries, kv int, vs []Attention) (Table, error) {
	shape := fmt.Sprintf("%d queries at KV %d, %d/%d heads of %d", queries, kv, m.Heads, m.KVHeads, m.HeadDim)
	c, err := sw.newAttnCase(m, queries, kv)
	if err != nil {
		return Table{}, fmt.Errorf("tune: %s %s: %w", kernel, shape, err)
	}
	defer c.free()
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
	for _, v := range vs {
		cell := Cell{Variant: v.String(), Ref: v == Attention{}, Default: v == Attention{}, Bound: attnBound}
		// The kernel's buffers (its dummy bindings) must outlive the runs.
		fa, err := flashattn.New(sw.dev, v.Options(0))
		if err != nil {
			cell.Status = err.Error() // a wave the device cannot run
		} else {
			err = sw.run(&cell, 1, c.poison, func(s *vk.Sequence) error { return c.record(s, sw.dev, fa, v, &cell) }, c.check)
			fa.Close()
		}
		if err != nil {
			return Table{}, fmt.Errorf("tune: %s %s %s: %w", kernel, shape, v, err)
		}
		sw.logCell(kernel, shape, cell)
		t.Cells = append(t.Cells, cell)
	}
	t.finish(work)
	return t, nil
}

// record records variant v (as fa) and, for the policy, names the
// geometry it chose.
func (c *attnCase) record(s *vk.Sequence, d *vk.Device, fa *flashattn.FlashAttn, v Attention, cell *Cell) error {
	plan, err := fa.Plan(c.sh)
	if err != nil {
		return err
	}
	if v == (Attention{}) {
		cell.Variant = fmt.Sprintf("policy (wave %d Br %d Bc %d splits %d)", plan.Wave.W, plan.Br, plan.Bc, plan.Splits)
	}
	io := c.io
	if n, _ := fa.ScratchBytes(c.sh); n > 0 {
		b, err := c.buffer(d, n)
		if err != nil {
			return err
		}
		io.Scratch = vk.Binding{Buf: b}
	}
	return fa.Record(s, io, c.sh)
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
