package flashattn

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/x448/float16"

	"github.com/vkinfer/vkinfer/attention"
	"github.com/vkinfer/vkinfer/internal/vktest"
	"github.com/vkinfer/vkinfer/vk"
	"github.com/vkinfer/vkinfer/vk/kernels"
)

func TestMain(m *testing.M) {
	os.Exit(vktest.Close(m.Run()))
}

// setup returns the package's shared validated device (lavapipe in CI):
// lavapipe compiles each pipeline once.
func setup(t testing.TB) *vk.Device { return vktest.Shared(t) }

// inputs is one attention problem: what the kernel reads, independent of
// the geometry it runs with. Every variant (Br, W, splits) of a problem
// shares its uploaded inputs and its float64 reference.
type inputs struct {
	dim, gqa int
	kvHeads  int // KV heads; q-heads = gqa × kvHeads
	// kv is the rows of the K/V cache holding keys. The batch's last query
	// sits at position kv+past-1.
	kv, queries int
	// past is how far the batch runs beyond the end of the cache, which is
	// then a ring of kv rows (Shape.Context): the positions kv.. wrapped to
	// rows 0.. . 0: the batch ends with the cache's keys, and 5 NaN rows
	// follow them, as a cache holds rows not yet written.
	past int
	// window is Shape.Window: each query sees its window latest keys.
	window int
	mask   bool
	// rising scales key j by 1 + 12 (j/kv)²: the scores climb along the
	// keys, so a running max keeps being passed by far (decode's lazy
	// rescale, see flash_attn_decode.comp, runs again and again).
	rising bool
}

// pos is the position of the batch's first query.
func (in inputs) pos() int   { return in.kv + in.past - in.queries }
func (in inputs) heads() int { return in.gqa * in.kvHeads }

// context is the number of cache rows the kernel is told about. A batch
// inside the cache gets 5 more rows than its keys, holding NaN, as a real
// cache holds rows not yet written: a kernel reading past the batch's
// causal limit poisons its output. A batch running past the cache gets
// exactly the cache, a ring (the NaN rows then follow outside the
// binding), and rows holding positions before the batch's first key (its
// first query's window) hold NaN too: no workgroup may read them.
func (in inputs) context() int {
	if in.past > 0 {
		return in.kv
	}
	return in.kv + nanRows
}

const nanRows = 5

// variant is the geometry a problem runs with.
type variant struct {
	br, wave int
	splits   int                 // 1: no split-k
	stage    attention.StagePref // staging K and V in shared memory: the policy's, or forced off or on
	bc       int                 // keys per tile, or per step in decode (0: the policy's)
	chunk    int                 // decode's f16 values per load (0: the policy's)
}

// tc is one kernel configuration: a problem and a geometry.
type tc struct {
	inputs
	variant
}

func (c tc) String() string {
	s := fmt.Sprintf("br%d/w%d/d%d/gqa%d/kv%d/q%d/split=%v/mask=%v", c.br, c.wave, c.dim, c.gqa, c.kv, c.queries, c.splits > 1, c.mask)
	if c.window > 0 {
		s += fmt.Sprintf("/window%d", c.window)
	}
	if c.splits > 1 && c.splits != 3 {
		s += fmt.Sprintf("/splits%d", c.splits)
	}
	if c.kvHeads != 1 {
		s += fmt.Sprintf("/kvheads%d", c.kvHeads)
	}
	if c.past > 0 {
		s += fmt.Sprintf("/past%d", c.past)
	}
	switch c.stage {
	case attention.StageOff:
		s += "/unstaged"
	case attention.StageOn:
		s += "/staged"
	}
	if c.bc != 0 {
		s += fmt.Sprintf("/bc%d", c.bc)
	}
	return s
}

// The axes of the check.
var (
	axisBr      = []int{1, 8, 16}
	axisWave    = []int{32, 64}
	axisDim     = []int{64, 80, 96, 128, 256}
	axisGQA     = []int{1, 4, 8}
	axisKV      = []int{1, 17, 255, 1000, 4097}
	axisQueries = []int{1, 7, 16, 100}
	// Split-k: 1 (none) or 3, a count that divides none of the KV lengths,
	// so splits are uneven and some are empty.
	axisSplits = []int{1, 3}
	axisMask   = []bool{false, true}
)

// fullProduct is every combination of the axes, grouped by problem (the
// variants of one problem are consecutive). One KV head: the GQA ratio is
// the q-head count, the least work that still puts 1, 4 or 8 q-heads on
// each KV head (TestFlashAttnKVHeads covers several KV heads).
func fullProduct() []tc {
	var out []tc
	for _, dim := range axisDim {
		for _, gqa := range axisGQA {
			for _, kv := range axisKV {
				for _, q := range axisQueries {
					for _, mask := range axisMask {
						in := inputs{dim: dim, gqa: gqa, kvHeads: 1, kv: kv, queries: q, mask: mask}
						for _, br := range axisBr {
							for _, w := range axisWave {
								for _, s := range axisSplits {
									out = append(out, tc{in, variant{br: br, wave: w, splits: s}})
								}
							}
						}
					}
				}
			}
		}
	}
	return out
}

// TestFlashAttn checks the kernel against the float64 reference on the same
// f16 K/V, relative error below 1e-3 (attention.RelErr over every output
// value of every case), for every combination of Br × W × head dim × GQA ×
// KV length × queries × split-k × mask: 7200 combinations.
//
// 1440 of them cannot occur and are counted apart, not run: those with more
// queries than the KV length (7, 16 or 100 queries at KV 1, 100 at KV 17).
// A batch's own keys are in the cache it attends over, so a batch of n
// queries sees at least n keys; attention.Shape.Check rejects such a shape,
// and the test checks that it does for each of them. (A batch running past
// the end of a cache that holds at least its queries is valid and runs in
// TestFlashAttnPastContext.)
//
// Then the 66 sliding-window cases of windowCases, windows over rings.
//
// The other 5760 run in a few minutes on lavapipe (docs/ATTENTION.md): the
// cases of each problem share one upload and one reference, computed once
// on every CPU beside the device work; a few large sequences over shared
// buffers each run with one submit; and the two waves run on two devices at
// once, so that lavapipe compiles (on first dispatch) and runs their
// pipelines on both cores.
func TestFlashAttn(t *testing.T) {
	d := setup(t)
	all := fullProduct()
	want := len(axisBr) * len(axisWave) * len(axisDim) * len(axisGQA) * len(axisKV) * len(axisQueries) * len(axisSplits) * len(axisMask)
	if len(all) != want {
		t.Fatalf("%d cases, the axes have %d combinations", len(all), want)
	}
	var cases, impossible []tc
	for _, c := range all {
		if c.queries > c.kv {
			impossible = append(impossible, c)
		} else {
			cases = append(cases, c)
		}
	}
	if len(impossible) != 1440 {
		t.Errorf("%d combinations with more queries than keys, want 1440", len(impossible))
	}
	windows := windowCases()
	wrapped := 0
	for _, c := range windows {
		if c.past > 0 && c.pos()/c.kv != (c.pos()+c.queries-1)/c.kv {
			wrapped++ // the batch's positions wrap around the ring
		}
	}
	if wrapped < 10 {
		t.Errorf("%d of %d window cases straddle the ring's wrap, want 10 or more", wrapped, len(windows))
	}
	cases = append(cases, windows...)
	fas := map[variant]*FlashAttn{}
	for _, c := range impossible {
		fa := fas[c.variant]
		if fa == nil {
			var err error
			if fa, err = New(d, Options{Wave: c.wave, Prefs: attention.Prefs{Br: c.br, Bc: c.bc, Splits: c.splits, Stage: c.stage, Chunk: c.chunk}}); err != nil {
				t.Fatal(err)
			}
			defer fa.Close()
			fas[c.variant] = fa
		}
		sh := Shape{Queries: c.queries, Heads: c.heads(), KVHeads: c.kvHeads, HeadDim: c.dim, Context: c.kv, Mask: c.mask}
		if p, err := fa.Plan(sh); err == nil {
			t.Errorf("%v: the plan accepts %d queries over %d keys (%v): run it", c, c.queries, c.kv, p)
		}
	}

	var (
		mu                       sync.Mutex
		compared, failed, staged int
		worst                    float64
		worstCase                tc
	)
	start := time.Now()
	refs := references(cases)
	t.Run("waves", func(t *testing.T) {
		for i, w := range axisWave {
			var mine []tc
			for _, c := range cases {
				if c.wave == w {
					mine = append(mine, c)
				}
			}
			t.Run(fmt.Sprintf("w%d", w), func(t *testing.T) {
				t.Parallel()
				dev := d
				if i > 0 {
					dev = vktest.Open(t)
				}
				runCases(t, dev, mine, refs, nil, func(r result) {
					e, err := r.check()
					mu.Lock()
					defer mu.Unlock()
					compared++
					if r.plan.Stage {
						staged++
					}
					if err != nil {
						failed++
						if failed <= 20 {
							t.Errorf("%v: %v", r.c, err)
						}
					} else if e > worst {
						worst, worstCase = e, r.c
					}
				})
			})
		}
	})
	if failed > 20 {
		t.Errorf("... %d failures in all", failed)
	}
	if compared != len(cases) {
		t.Errorf("compared %d of %d cases", compared, len(cases))
	}
	if staged == 0 {
		t.Error("no case staged K and V in shared memory")
	}
	t.Logf("%d combinations and %d window cases: %d compared (%d staged) in %v, %d failed, worst relative error %.2e (%v); %d impossible (more queries than keys), each rejected by the plan",
		len(all), len(windows), compared, staged, time.Since(start).Round(time.Millisecond), failed, worst, worstCase, len(impossible))
}

// TestFlashAttnCatchesCorruption shows that the comparison TestFlashAttn
// runs reads every value of every case: one output value, at a random place
// in each case's output, is moved by 0.5 on the device after the run, and
// every case must then fail; in one small case, each value in turn.
func TestFlashAttnCatchesCorruption(t *testing.T) {
	d := setup(t)
	var cases []tc
	in := inputs{dim: 80, gqa: 4, kvHeads: 1, kv: 255, queries: 16, mask: true}
	for _, br := range axisBr {
		for _, w := range axisWave {
			for _, s := range axisSplits {
				cases = append(cases, tc{in, variant{br, w, s, attention.StageAuto, 0, 0}})
			}
		}
	}
	cases = append(cases, tc{inputs{dim: 64, gqa: 1, kvHeads: 1, kv: 10, queries: 7, past: 3}, variant{1, 32, 3, attention.StageAuto, 0, 0}})
	r := rand.New(rand.NewPCG(7, 7))
	tamper := func(i int, c tc, out vk.Binding) error {
		at := out.Off + 4*int64(r.IntN(c.queries*c.heads()*c.dim))
		v := make([]float32, 1)
		if err := out.Buf.ReadF32(at, v); err != nil {
			return err
		}
		return out.Buf.WriteF32(at, []float32{v[0] + 0.5}) // outputs lie in [-1, 1]
	}
	caught := 0
	runCases(t, d, cases, nil, tamper, func(r result) {
		if r.err != nil {
			t.Errorf("%v: %v", r.c, r.err)
			return
		}
		if _, err := r.check(); err == nil {
			t.Errorf("%v: a corrupted output value passes", r.c)
		} else {
			caught++
		}
	})
	if caught != len(cases) {
		t.Errorf("caught %d of %d corrupted cases", caught, len(cases))
	}

	// Every position of one output: the comparison covers all of them.
	small := tc{inputs{dim: 64, gqa: 4, kvHeads: 1, kv: 17, queries: 7}, variant{8, 32, 1, attention.StageAuto, 0, 0}}
	runCases(t, d, []tc{small}, nil, nil, func(r result) {
		if _, err := r.check(); err != nil {
			t.Fatalf("%v: %v", r.c, err)
		}
		for i := range r.got {
			keep := r.got[i]
			r.got[i] += 0.5
			if _, err := r.check(); err == nil {
				t.Errorf("%v: output value %d off by 0.5 passes", r.c, i)
			}
			r.got[i] = keep
		}
	})
}

// TestFlashAttnTeeth shows the 1e-3 bound catches near misses: the kernel's
// output measured against a reference whose causal limit is one key later,
// that ignores the mask, or whose window is one key shorter (in prefill
// and in decode, over a ring), fails.
func TestFlashAttnTeeth(t *testing.T) {
	d := setup(t)
	causal := tc{inputs{dim: 64, gqa: 4, kvHeads: 2, kv: 20, queries: 7}, variant{8, 32, 1, attention.StageAuto, 0, 0}}
	masked := tc{inputs{dim: 96, gqa: 1, kvHeads: 2, kv: 300, queries: 16, mask: true}, variant{16, 64, 1, attention.StageAuto, 0, 0}}
	window := tc{inputs{dim: 64, gqa: 4, kvHeads: 1, kv: 30, queries: 16, past: 77, window: 15}, variant{16, 32, 1, attention.StageAuto, 0, 0}}
	decode := tc{inputs{dim: 128, gqa: 4, kvHeads: 1, kv: 40, queries: 1, past: 200, window: 40}, variant{1, 32, 3, attention.StageAuto, 0, 0}}
	runCases(t, d, []tc{causal, masked, window, decode}, nil, nil, func(r result) {
		if _, err := r.check(); err != nil {
			t.Fatalf("%v: %v", r.c, err)
		}
		p := problem(r.c.inputs)
		if r.c == causal {
			p.Pos++ // one more key per row: fill the NaN row after the keys for it
			kvd := r.c.kvHeads * r.c.dim
			copy(p.K[r.c.kv*kvd:], p.K[:kvd])
			copy(p.V[r.c.kv*kvd:], p.V[:kvd])
		} else if r.c.window > 0 {
			p.Window--
		} else {
			p.Mask = nil
		}
		wrong, err := attention.Reference(p)
		if err != nil {
			t.Fatal(err)
		}
		if e := attention.RelErr(r.got, wrong, r.c.dim); e < 1e-3 {
			t.Errorf("%v: a wrong reference passes (rel err %.2e)", r.c, e)
		}
	})
}

// TestFlashAttnPastContext runs batches whose positions run past the
// cache, at a position past 0 (the full product's run from 0): the cache is
// a ring, the batch's last positions wrapped to its first rows, and the
// kernel must attend over the positions the ring holds (each row's own and
// the earlier ones from the batch's end less the ring's size) and read
// nothing else (the rows past the ring, and those holding older positions,
// are NaN, so a read would show).
func TestFlashAttnPastContext(t *testing.T) {
	in := inputs{dim: 64, gqa: 2, kvHeads: 2, kv: 90, queries: 16, past: 10}
	expect(t, []tc{{in, variant{8, 32, 1, attention.StageAuto, 0, 0}}, {in, variant{8, 32, 3, attention.StageAuto, 0, 0}}})
}

// windowCases are the sliding windows over ring caches that TestFlashAttn
// adds to the full product: a sample of the product's axes (not its
// square) crossed with windows of 1 key, 7, 40 and more than the depth,
// and with no window over a ring that has wrapped. The cache is a ring of
// Window+Queries-1 rows (the size a sliding-window layer keeps: every row
// in use), a looser one with 11 rows more (those holding older positions
// NaN, so a read past the window shows), or no ring at all (a cache of
// every position, the rows before the batch's window NaN). Depths are
// several times the rings, so most batches straddle their wrap. Every
// (Br, wave, split) geometry meets every window; head dim, GQA, queries,
// ring, depth and mask are drawn for each case from a fixed seed; head dim
// 256 runs with a window at both waves in both kernels besides. They run
// with the product because their pipelines are the product's (a window is
// a push constant): on their own, lavapipe would compile them all again.
func windowCases() []tc {
	r := rand.New(rand.NewPCG(18, 256))
	pick := func(v ...int) int { return v[r.IntN(len(v))] }
	// in lays out a problem of depth positions (the batch's last query at
	// depth-1) in a ring of the given kind: 0 none, 1 Window+Queries-1
	// rows, 2 that and 11 more; with no window, a ring of a third of the
	// depth.
	in := func(dim, gqa, queries, window, ring, depth int, mask bool) inputs {
		p := inputs{dim: dim, gqa: gqa, kvHeads: 1, kv: depth, queries: queries, window: window, mask: mask}
		switch {
		case window == 0:
			p.kv = max(depth/3, queries)
		case ring > 0:
			p.kv = window + queries - 1 + 11*(ring-1)
		}
		p.past = depth - p.kv
		return p
	}
	var cases []tc
	for _, br := range axisBr {
		for _, w := range axisWave {
			for _, splits := range axisSplits {
				for _, window := range []int{1, 7, 40, -1, 0} {
					depth := pick(300, 1000, 2500)
					ring := r.IntN(3)
					if window == -1 {
						window, ring = depth+50, 0 // more than the depth: a global layer's cache
					}
					queries := pick(axisQueries...)
					if br == 1 {
						queries = pick(1, 1, 7)
					}
					c := in(pick(axisDim...), pick(axisGQA...), queries, window, ring, depth, r.IntN(2) == 0)
					cases = append(cases, tc{c, variant{br: br, wave: w, splits: splits}})
				}
			}
		}
	}
	for _, w := range axisWave {
		cases = append(cases,
			tc{in(256, 4, 1, 40, 1, 1000, false), variant{br: 1, wave: w, splits: 3}},
			tc{in(256, 2, 100, 7, 2, 1000, true), variant{br: 8, wave: w, splits: 1}},
			tc{in(256, 1, 16, 40, 1, 300, false), variant{br: 16, wave: w, splits: 3}})
	}
	return cases
}

// TestFlashAttnKVHeads runs problems with several KV heads, which the full
// product (one KV head) leaves out: the head-group dimension of the grid
// and each KV head's offset in the cache rows.
func TestFlashAttnKVHeads(t *testing.T) {
	var cases []tc
	for _, in := range []inputs{
		{dim: 128, gqa: 4, kvHeads: 3, kv: 255, queries: 1},
		{dim: 80, gqa: 8, kvHeads: 2, kv: 1000, queries: 16, mask: true},
		{dim: 256, gqa: 1, kvHeads: 2, kv: 100, queries: 100},
	} {
		for _, br := range axisBr {
			for _, s := range axisSplits {
				cases = append(cases, tc{in, variant{br, 32, s, attention.StageAuto, 0, 0}}, tc{in, variant{br, 64, s, attention.StageAuto, 0, 0}})
			}
		}
		// Prefill rows also load K and V per row slot where shared memory
		// cannot hold a staged tile.
		cases = append(cases, tc{in, variant{8, 32, 1, attention.StageOff, 0, 0}}, tc{in, variant{16, 64, 3, attention.StageOff, 0, 0}})
	}
	expect(t, cases)
}

// TestFlashAttnDecodeShapes runs the decode kernel where the full product
// does not reach: q-heads per workgroup that are not a power of two (7 and
// 3 at head dim 64, where the whole group fits the register budget; the
// kernel pads their scores to 8 and 4), and forced steps of 8 and 16 keys
// per slot at wave 32 and 8 at wave 64 (the policy takes 2 on lavapipe, 4
// on NVIDIA), and loads of 8 values instead of 4. 16 keys per slot at
// wave 64 would take lavapipe's compiler 100 s.
func TestFlashAttnDecodeShapes(t *testing.T) {
	d := setup(t)
	var cases []tc
	for _, gqa := range []int{7, 3} {
		in := inputs{dim: 64, gqa: gqa, kvHeads: 2, kv: 1000, queries: 1}
		for _, w := range axisWave {
			fa, err := New(d, Options{Wave: w})
			if err != nil {
				t.Fatal(err)
			}
			p, err := fa.Plan(Shape{Queries: 1, Heads: in.heads(), KVHeads: in.kvHeads, HeadDim: in.dim, Context: in.context()})
			fa.Close()
			if err != nil || p.Heads != gqa {
				t.Fatalf("gqa %d at wave %d: plan %v %v, want all %d q-heads in one workgroup", gqa, w, p, err, gqa)
			}
			for _, s := range axisSplits {
				cases = append(cases, tc{in, variant{1, w, s, attention.StageAuto, 0, 0}})
			}
		}
	}
	// Bc is keys per step of the workgroup: the plan's slots × keys per slot.
	in := inputs{dim: 128, gqa: 4, kvHeads: 1, kv: 1000, queries: 1, mask: true}
	for _, f := range []struct{ wave, perSlot, splits int }{{32, 8, 3}, {32, 16, 1}, {64, 8, 3}} {
		fa, err := New(d, Options{Wave: f.wave})
		if err != nil {
			t.Fatal(err)
		}
		p, err := fa.Plan(Shape{Queries: 1, Heads: in.heads(), KVHeads: in.kvHeads, HeadDim: in.dim, Context: in.context(), Mask: true})
		fa.Close()
		if err != nil {
			t.Fatal(err)
		}
		cases = append(cases, tc{in, variant{1, f.wave, f.splits, attention.StageAuto, p.Slots * f.perSlot, 0}})
	}
	// Loads of 8 values (the policy takes 4): a key row over half the
	// lanes (16 at head dim 128; lanes past the row idle at 80), 2 chunks a
	// lane at 256 on lavapipe.
	for _, dim := range []int{80, 128, 256} {
		for _, w := range axisWave {
			cases = append(cases, tc{inputs{dim: dim, gqa: 2, kvHeads: 2, kv: 1000, queries: 1, mask: true}, variant{1, w, 3, attention.StageAuto, 0, 8}})
		}
	}
	expect(t, cases)
}

// TestFlashAttnManySplits merges many splits, up to attention.MaxSplits,
// where each lane of the reduce pass sums several of them, most of them
// empty at the shorter lengths.
func TestFlashAttnManySplits(t *testing.T) {
	expect(t, []tc{
		{inputs{dim: 80, gqa: 4, kvHeads: 2, kv: 4097, queries: 1}, variant{1, 32, 40, attention.StageAuto, 0, 0}},
		{inputs{dim: 128, gqa: 8, kvHeads: 2, kv: 1000, queries: 1}, variant{1, 64, attention.MaxSplits, attention.StageAuto, 0, 0}},
		{inputs{dim: 256, gqa: 1, kvHeads: 2, kv: 255, queries: 7, mask: true}, variant{8, 32, attention.MaxSplits, attention.StageAuto, 0, 0}},
		// Early in a long context: the keys fill only the first splits
		// (flash_attn_decode's LEAST steps a split at least), or the first
		// alone, which then writes the output itself; the rest return at
		// once.
		{inputs{dim: 128, gqa: 4, kvHeads: 2, kv: 40, queries: 1}, variant{1, 32, 8, attention.StageAuto, 0, 0}},
		{inputs{dim: 128, gqa: 4, kvHeads: 2, kv: 600, queries: 1}, variant{1, 32, 8, attention.StageAuto, 0, 0}},
		{inputs{dim: 64, gqa: 2, kvHeads: 2, kv: 3, queries: 1}, variant{1, 32, attention.MaxSplits, attention.StageAuto, 0, 0}},
	})
}

// expect runs cases and fails on any that misses the bound.
func expect(t *testing.T, cases []tc) {
	t.Helper()
	n := 0
	runCases(t, setup(t), cases, nil, nil, func(r result) {
		n++
		if _, err := r.check(); err != nil {
			t.Errorf("%v: %v", r.c, err)
		}
	})
	if n != len(cases) {
		t.Errorf("compared %d of %d cases", n, len(cases))
	}
}

// problem builds the inputs of a problem as the reference sees them,
// deterministically from its shape: Q ~ U(-2, 2) (peaked enough that a
// misplaced max shows), K, V ~ U(-1, 1) rounded to f16, for positions
// 0..kv+past-1 in the cache's rows (a ring of kv rows when past > 0). Rows
// holding no key the batch may see (not yet written, or before its first
// query's first key) hold NaN; the mask, when asked for, covers every row.
func problem(in inputs) attention.Problem {
	r := rand.New(rand.NewPCG(uint64(in.dim*131+in.gqa*17+in.kv+in.kvHeads<<20+in.window<<24), uint64(in.queries)))
	heads, end, rows := in.heads(), in.kv+in.past, in.context()
	p := attention.Problem{Queries: in.queries, Heads: heads, KVHeads: in.kvHeads, HeadDim: in.dim,
		Pos: in.pos(), Window: in.window, Scale: 1 / math.Sqrt(float64(in.dim))}
	if in.past > 0 {
		p.Slots = in.kv
	}
	p.Q = make([]float32, in.queries*heads*in.dim)
	for i := range p.Q {
		p.Q[i] = float32(4*r.Float64() - 2)
	}
	kvd := in.kvHeads * in.dim
	p.K, p.V = make([]uint16, rows*kvd), make([]uint16, rows*kvd)
	for i := range p.K {
		p.K[i], p.V[i] = nanF16, nanF16
	}
	first := p.First(p.Pos)
	for i := range end * kvd {
		k := 2*r.Float64() - 1
		if in.rising {
			f := float64(i/kvd) / float64(in.kv)
			k *= 1 + 12*f*f
		}
		v := 2*r.Float64() - 1
		if i/kvd >= first {
			at := (i/kvd%rows)*kvd + i%kvd
			p.K[at] = float16.Fromfloat32(float32(k)).Bits()
			p.V[at] = float16.Fromfloat32(float32(v)).Bits()
		}
	}
	if in.mask {
		p.MaskStride = rows
		p.Mask = make([]float32, in.queries*rows)
		maskFor(p.Mask, in.queries, rows, rand.New(rand.NewPCG(uint64(in.kv), 2)))
	}
	return p
}

var nanF16 = float16.Fromfloat32(float32(math.NaN())).Bits()

// maskFor fills m [queries][stride] with a random additive mask in
// f16-exact values: U(-2, 2) with 20% -Inf, the second tile of keys fully
// masked for every query (so tile skipping runs), and query row 1 fully
// masked (its output must be 0).
func maskFor(m []float32, queries, stride int, r *rand.Rand) {
	for i := range m {
		if r.IntN(5) == 0 {
			m[i] = float32(math.Inf(-1))
		} else {
			m[i] = float16.Fromfloat32(float32(4*r.Float64() - 2)).Float32()
		}
	}
	for i := 0; i < queries; i++ {
		for j := 32; j < min(64, stride); j++ {
			m[i*stride+j] = float32(math.Inf(-1))
		}
		if i == 1 {
			for j := 0; j < stride; j++ {
				m[i*stride+j] = float32(math.Inf(-1))
			}
		}
	}
}

// result is one case's output beside its reference.
type result struct {
	c    tc
	plan attention.Plan
	got  []float32
	want []float64
	err  error // the case could not be planned, recorded or referenced
}

// check compares every output value with the reference (attention.RelErr:
// any NaN, or a missing value, fails) and returns the relative error.
func (r result) check() (float64, error) {
	if r.err != nil {
		return 0, r.err
	}
	if r.plan.Br != r.c.br || r.plan.Splits != r.c.splits || r.plan.Wave.W != r.c.wave {
		return 0, fmt.Errorf("plan %v does not honour Br %d, splits %d, wave %d", r.plan, r.c.br, r.c.splits, r.c.wave)
	}
	if n := r.c.queries * r.c.heads() * r.c.dim; len(r.got) != n || len(r.want) != n {
		return 0, fmt.Errorf("%d outputs and %d reference values, want %d", len(r.got), len(r.want), n)
	}
	e := attention.RelErr(r.got, r.want, r.c.dim)
	if !(e < 1e-3) {
		return e, fmt.Errorf("relative error %.3e >= 1e-3 (%v)", e, r.plan)
	}
	return e, nil
}

// A problem's reference, computed once for all its cases.
type refJob struct {
	in    inputs
	want  []float64
	err   error
	done  chan struct{}
	users atomic.Int64 // cases yet to compare with it; at 0 it is dropped
}

// references starts computing the float64 references of the problems of
// cases, in order of first use, on every CPU beside the device work.
func references(cases []tc) map[inputs]*refJob {
	jobs := map[inputs]*refJob{}
	var order []*refJob
	for _, c := range cases {
		j := jobs[c.inputs]
		if j == nil {
			j = &refJob{in: c.inputs, done: make(chan struct{})}
			jobs[c.inputs] = j
			order = append(order, j)
		}
		j.users.Add(1)
	}
	next := make(chan *refJob, len(order))
	for _, j := range order {
		next <- j
	}
	close(next)
	for range runtime.GOMAXPROCS(0) {
		go func() {
			for j := range next {
				j.want, j.err = attention.Reference(problem(j.in))
				close(j.done)
			}
		}()
	}
	return jobs
}

// The batch budget: the inputs and the outputs (with split partials) of
// the problems one sequence holds. Whole problems go in a batch, so one may
// exceed it alone.
const batchBytes = 32 << 20

// align is the offset of every sub-allocation: each device accepts a
// storage binding there (minStorageBufferOffsetAlignment is at most 256).
const align = 256

func alignUp(n int64) int64 { return (n + align - 1) &^ (align - 1) }

// planned is a case with its place in the batch buffers.
type planned struct {
	tc
	job     *refJob
	fa      *FlashAttn
	sh      Shape
	plan    attention.Plan
	err     error
	in      int64 // offset of its problem's inputs in the input buffer
	out     int64 // offset of its output in the output buffer
	outN    int64
	scratch int64 // offset of its split partials, after the output
	scrN    int64
}

// runCases runs cases on d and calls each with every case's result, in
// order. Cases with equal inputs that follow one another share one upload;
// all cases with equal inputs share one reference, from refs (nil: computed
// here), which may serve several runCases at once. The cases go into a few
// sequences over two buffers (inputs, outputs) allocated once: each
// sequence holds whole problems up to batchBytes, runs with one submit, and
// its outputs are read back together. Outputs and split partials start as
// NaN, so a value the kernel does not write fails the comparison. tamper,
// when not nil, runs after each submit, before the read-back, with each
// case's output binding (it may overwrite values there).
func runCases(t testing.TB, d *vk.Device, cases []tc, refs map[inputs]*refJob, tamper func(i int, c tc, out vk.Binding) error, each func(result)) {
	t.Helper()
	if refs == nil {
		refs = references(cases)
	}

	// One FlashAttn per geometry; pipelines are memoised in each.
	fas := map[variant]*FlashAttn{}
	defer func() {
		for _, fa := range fas {
			fa.Close()
		}
	}()
	ps := make([]planned, len(cases))
	for i, c := range cases {
		p := &ps[i]
		p.tc, p.job = c, refs[c.inputs]
		fa := fas[c.variant]
		if fa == nil {
			var err error
			if fa, err = New(d, Options{Wave: c.wave, Prefs: attention.Prefs{Br: c.br, Bc: c.bc, Splits: c.splits, Stage: c.stage, Chunk: c.chunk}}); err != nil {
				t.Fatalf("%v: %v", c, err)
			}
			fas[c.variant] = fa
		}
		p.fa = fa
		p.sh = Shape{Queries: c.queries, Heads: c.heads(), KVHeads: c.kvHeads, HeadDim: c.dim,
			Context: c.context(), Window: c.window, Scale: float32(1 / math.Sqrt(float64(c.dim))), Mask: c.mask}
		if p.plan, p.err = fa.Plan(p.sh); p.err == nil {
			p.scrN, p.err = fa.ScratchBytes(p.sh)
		}
		p.outN = 4 * int64(c.queries*c.heads()*c.dim)
	}

	// Batches of whole problems up to batchBytes, and the buffer sizes they
	// need. A problem's inputs sit at in, its cases' outputs (each followed
	// by its split partials) from out on.
	type batch struct {
		lo, hi  int // cases [lo, hi)
		in, out int64
	}
	var batches []batch
	var inMax, outMax int64
	for lo := 0; lo < len(ps); {
		hi := lo + 1
		for hi < len(ps) && ps[hi].inputs == ps[lo].inputs {
			hi++
		}
		inN := alignUp(inputBytes(ps[lo].inputs))
		var outN int64
		for i := lo; i < hi; i++ {
			outN += alignUp(ps[i].outN) + alignUp(ps[i].scrN)
		}
		if n := len(batches); n == 0 || batches[n-1].in+batches[n-1].out+inN+outN > batchBytes {
			batches = append(batches, batch{lo: lo})
		}
		b := &batches[len(batches)-1]
		for i := lo; i < hi; i++ {
			p := &ps[i]
			p.in, p.out = b.in, b.out
			p.scratch = p.out + alignUp(p.outN)
			b.out = p.scratch + alignUp(p.scrN)
		}
		b.in += inN
		b.hi = hi
		inMax, outMax = max(inMax, b.in), max(outMax, b.out)
		lo = hi
	}
	inBuf, err := d.NewBuffer(inMax, false)
	if err != nil {
		t.Fatal(err)
	}
	defer inBuf.Free()
	outBuf, err := d.NewBuffer(outMax, false)
	if err != nil {
		t.Fatal(err)
	}
	defer outBuf.Free()
	nan := nanBytes(outMax)

	for _, b := range batches {
		// Upload the batch's problems and poison its outputs.
		in := make([]byte, b.in)
		for i := b.lo; i < b.hi; i++ {
			if i == b.lo || ps[i].inputs != ps[i-1].inputs {
				copy(in[ps[i].in:], inputData(ps[i].inputs))
			}
		}
		if err := inBuf.Write(0, in); err != nil {
			t.Fatal(err)
		}
		if err := outBuf.Write(0, nan[:b.out]); err != nil {
			t.Fatal(err)
		}

		s := d.NewSequence()
		for i := b.lo; i < b.hi; i++ {
			p := &ps[i]
			if p.err == nil {
				p.err = p.fa.Record(s, p.io(inBuf, outBuf), p.sh)
			}
		}
		if err := s.End(); err != nil {
			t.Fatal(err)
		}
		if err := s.Run(); err != nil {
			t.Fatal(err)
		}
		s.Free()
		for i := b.lo; tamper != nil && i < b.hi; i++ {
			if err := tamper(i, ps[i].tc, ps[i].io(inBuf, outBuf).Out); err != nil {
				t.Fatal(err)
			}
		}
		out := make([]float32, b.out/4)
		if err := outBuf.ReadF32(0, out); err != nil {
			t.Fatal(err)
		}
		for i := b.lo; i < b.hi; i++ {
			p := &ps[i]
			<-p.job.done
			r := result{c: p.tc, plan: p.plan, err: p.err, want: p.job.want,
				got: out[p.out/4 : (p.out+p.outN)/4]}
			if r.err == nil {
				r.err = p.job.err
			}
			each(r)
			if p.job.users.Add(-1) == 0 {
				p.job.want = nil // every case has compared: let it go
			}
		}
	}
}

// The input layout of a problem: q f32 [queries][heads·dim]; the K and V
// caches f16 [kv+nanRows][kvHeads·dim], rows past the context and those
// problem leaves NaN NaN; the mask f16 [queries][context], entries of NaN
// rows NaN; the step (pos, then sequence 0).
func (in inputs) layout() (q, k, v, mask, step, end int64) {
	kvBytes := alignUp(2 * int64((in.kv+nanRows)*in.kvHeads*in.dim))
	q = 0
	k = alignUp(4 * int64(in.queries*in.heads()*in.dim))
	v = k + kvBytes
	mask = v + kvBytes
	step = mask
	if in.mask {
		step += alignUp(2 * int64(in.queries*in.context()))
	}
	return q, k, v, mask, step, step + 8
}

func inputBytes(in inputs) int64 {
	_, _, _, _, _, end := in.layout()
	return end
}

// inputData encodes a problem's inputs in its layout.
func inputData(in inputs) []byte {
	p := problem(in)
	q, k, v, mask, step, end := in.layout()
	b := make([]byte, end)
	for i, x := range p.Q {
		binary.LittleEndian.PutUint32(b[q+4*int64(i):], math.Float32bits(x))
	}
	kvd := in.kvHeads * in.dim
	for i := range (in.kv + nanRows) * kvd {
		kh, vh := nanF16, nanF16
		if i < len(p.K) {
			kh, vh = p.K[i], p.V[i]
		}
		binary.LittleEndian.PutUint16(b[k+2*int64(i):], kh)
		binary.LittleEndian.PutUint16(b[v+2*int64(i):], vh)
	}
	if in.mask {
		ctx := in.context()
		for i := range in.queries {
			for j := range ctx {
				h := nanF16
				if p.K[j*kvd] != nanF16 {
					h = float16.Fromfloat32(p.Mask[i*p.MaskStride+j]).Bits()
				}
				binary.LittleEndian.PutUint16(b[mask+2*int64(i*ctx+j):], h)
			}
		}
	}
	binary.LittleEndian.PutUint32(b[step:], uint32(p.Pos))
	return b
}

// io binds a case's regions of the batch buffers.
func (p *planned) io(in, out *vk.Buffer) IO {
	q, k, v, mask, step, _ := p.inputs.layout()
	bind := func(b *vk.Buffer, off, size int64) vk.Binding { return vk.Binding{Buf: b, Off: off, Size: size} }
	kvd := int64(p.kvHeads * p.dim)
	io := IO{
		Q:    bind(in, p.in+q, p.outN),
		K:    bind(in, p.in+k, 2*int64(p.context())*kvd),
		V:    bind(in, p.in+v, 2*int64(p.context())*kvd),
		Step: bind(in, p.in+step, 8),
		Out:  bind(out, p.out, p.outN),
	}
	if p.mask {
		io.Mask = bind(in, p.in+mask, (2*int64(p.queries*p.context())+3)&^3)
	}
	if p.scrN > 0 {
		io.Scratch = bind(out, p.scratch, p.scrN)
	}
	return io
}

func buffer(t testing.TB, d *vk.Device, data []byte) *vk.Buffer {
	t.Helper()
	b, err := d.NewBuffer(int64(max(len(data), 16)), false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Free)
	if err := b.Write(0, data); err != nil {
		t.Fatal(err)
	}
	return b
}

func whole(b *vk.Buffer) vk.Binding { return vk.Binding{Buf: b} }

func f32Bytes(v []float32) []byte {
	b := make([]byte, 0, 4*len(v))
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

// u16Bytes encodes f16 bit patterns, padded to whole 32-bit words.
func u16Bytes(v []uint16) []byte {
	b := make([]byte, 0, 2*len(v)+2)
	for _, x := range v {
		b = binary.LittleEndian.AppendUint16(b, x)
	}
	if len(b)%4 != 0 {
		b = append(b, 0, 0)
	}
	return b
}

func nanBytes(n int64) []byte {
	b := make([]byte, 0, n)
	for int64(len(b)) < n {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(float32(math.NaN())))
	}
	return b
}

// TestFlashAttnQ8Output checks the 8-bit copy of the output (IO.Q8, for
// decode's output projection): written by decode's own merge and by
// prefill's reduce pass with split-k, and by the decode kernel itself
// without (head groups of 1 to 4 heads and of 3, two and four lane groups,
// head dims of 2, 3 and 4 blocks): each value within half a step of the
// f32 output, each block's step max|o|/127, and the f32 output bit for bit
// the one written without the copy.
func TestFlashAttnQ8Output(t *testing.T) {
	cases := []struct {
		in    inputs
		prefs attention.Prefs
	}{
		{inputs{dim: 128, gqa: 4, kvHeads: 2, kv: 1000, queries: 3}, attention.Prefs{Br: 1, Splits: 8}},
		{inputs{dim: 128, gqa: 4, kvHeads: 2, kv: 1000, queries: 3}, attention.Prefs{Br: 8, Splits: 8}},
		{inputs{dim: 128, gqa: 4, kvHeads: 2, kv: 1000, queries: 3}, attention.Prefs{Br: 1, Splits: 1}},
		// A split plan early in its context: one split with keys (which
		// writes the copy itself), then a few of the eight.
		{inputs{dim: 128, gqa: 4, kvHeads: 2, kv: 40, queries: 1}, attention.Prefs{Br: 1, Splits: 8}},
		{inputs{dim: 128, gqa: 4, kvHeads: 2, kv: 600, queries: 1}, attention.Prefs{Br: 1, Splits: 8}},
		{inputs{dim: 128, gqa: 4, kvHeads: 2, kv: 77, queries: 2}, attention.Prefs{Br: 1, Splits: 1, Heads: 2}},
		{inputs{dim: 64, gqa: 4, kvHeads: 1, kv: 300, queries: 1}, attention.Prefs{Br: 1, Splits: 1, Heads: 1, Groups: 2}},
		{inputs{dim: 96, gqa: 3, kvHeads: 3, kv: 257, queries: 2}, attention.Prefs{Br: 1, Splits: 1}},
		{inputs{dim: 96, gqa: 3, kvHeads: 3, kv: 257, queries: 2}, attention.Prefs{Br: 1, Splits: 1, Groups: 4}},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("d%d-g%d-br%d-s%d-h%d-wg%d", c.in.dim, c.in.gqa, c.prefs.Br, c.prefs.Splits, c.prefs.Heads, c.prefs.Groups),
			func(t *testing.T) { testQ8Output(t, c.in, c.prefs) })
	}
}

// mustPlan is f's plan for sh.
func (f *FlashAttn) mustPlan(t *testing.T, sh Shape) attention.Plan {
	t.Helper()
	p, err := f.Plan(sh)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func testQ8Output(t *testing.T, in inputs, prefs attention.Prefs) {
	d := setup(t)
	fa, err := New(d, Options{Wave: 32, Prefs: prefs})
	if err != nil {
		t.Fatal(err)
	}
	defer fa.Close()
	sh := Shape{Queries: in.queries, Heads: in.heads(), KVHeads: in.kvHeads, HeadDim: in.dim,
		Context: in.context(), Scale: float32(1 / math.Sqrt(float64(in.dim)))}
	if !fa.WritesQ8(sh) {
		t.Fatalf("plan %v with head dim %d does not write the 8-bit copy", fa.mustPlan(t, sh), in.dim)
	}
	if p := fa.mustPlan(t, sh); p.Br != prefs.Br || p.Splits != prefs.Splits {
		t.Fatalf("plan %v, want Br %d and %d splits", p, prefs.Br, prefs.Splits)
	}
	scr, err := fa.ScratchBytes(sh)
	if err != nil {
		t.Fatal(err)
	}
	n, K := in.queries, in.heads()*in.dim
	outN, q8N := 4*int64(n*K), kernels.Q8Bytes(n, K)
	inBuf := buffer(t, d, inputData(in))
	outBuf := buffer(t, d, make([]byte, alignUp(outN)+alignUp(scr)+q8N))
	p := planned{tc: tc{inputs: in}, sh: sh, outN: outN, scrN: scr, scratch: alignUp(outN)}
	io := p.io(inBuf, outBuf)
	plain := runFA(t, fa, sh, io, n*K)
	io.Q8 = vk.Binding{Buf: outBuf, Off: alignUp(outN) + alignUp(scr), Size: q8N}
	out := runFA(t, fa, sh, io, n*K)
	for i := range out {
		if math.Float32bits(out[i]) != math.Float32bits(plain[i]) {
			t.Fatalf("value %d: %g with the 8-bit copy, %g without", i, out[i], plain[i])
		}
	}
	raw := make([]byte, q8N)
	if err := outBuf.Read(io.Q8.Off, raw); err != nil {
		t.Fatal(err)
	}
	got, err := kernels.DecodeQ8(raw, n, K)
	if err != nil {
		t.Fatal(err)
	}
	for b := 0; b < n*K/32; b++ {
		amax := 0.0
		for _, v := range out[32*b : 32*b+32] {
			amax = max(amax, math.Abs(float64(v)))
		}
		step := amax / 127
		if step == 0 {
			t.Fatalf("block %d of the output is all zero: nothing checked", b)
		}
		for i := 32 * b; i < 32*b+32; i++ {
			if e := math.Abs(float64(got[i] - out[i])); e > step*(0.5+1e-5) {
				t.Fatalf("value %d: 8-bit copy %g, output %g (step %g)", i, got[i], out[i], step)
			}
		}
	}
}

// TestFlashAttnRisingScores runs keys whose scores climb (inputs.rising):
// decode raises each head's max many times, across splits and slots.
func TestFlashAttnRisingScores(t *testing.T) {
	var cases []tc
	for _, w := range axisWave {
		for _, s := range []int{1, 3} {
			for _, mask := range []bool{false, true} {
				cases = append(cases, tc{inputs{dim: 128, gqa: 4, kvHeads: 2, kv: 1000, queries: 1, mask: mask, rising: true},
					variant{1, w, s, attention.StageAuto, 0, 0}})
			}
		}
	}
	expect(t, cases)
}

// TestFlashAttnDecodeReplays replays one split decode recording: the split
// that finishes last merges and resets its counter, so every replay must
// merge again (a counter left counting would leave the poisoned output).
// Two recordings in one sequence with no barrier between them run at once
// and must not share counters.
func TestFlashAttnDecodeReplays(t *testing.T) {
	d := setup(t)
	in := inputs{dim: 64, gqa: 4, kvHeads: 2, kv: 1000, queries: 1}
	fa, err := New(d, Options{Wave: 32, Prefs: attention.Prefs{Splits: 5}})
	if err != nil {
		t.Fatal(err)
	}
	defer fa.Close()
	sh := Shape{Queries: in.queries, Heads: in.heads(), KVHeads: in.kvHeads, HeadDim: in.dim,
		Context: in.context(), Scale: float32(1 / math.Sqrt(float64(in.dim)))}
	scr, err := fa.ScratchBytes(sh)
	if err != nil || scr == 0 {
		t.Fatalf("scratch %d %v: want a split plan", scr, err)
	}
	outN := 4 * int64(in.queries*in.heads()*in.dim)
	per := alignUp(outN) + alignUp(scr)
	inBuf := buffer(t, d, inputData(in))
	outBuf := buffer(t, d, make([]byte, 2*per))
	s := d.NewSequence()
	defer s.Free()
	for r := range 2 {
		p := planned{tc: tc{inputs: in}, sh: sh, outN: outN, scrN: scr, out: int64(r) * per, scratch: int64(r)*per + alignUp(outN)}
		if err := fa.Record(s, p.io(inBuf, outBuf), sh); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.End(); err != nil {
		t.Fatal(err)
	}
	var first []float32
	for run := range 3 {
		if err := outBuf.Write(0, nanBytes(2*per)); err != nil {
			t.Fatal(err)
		}
		if err := s.Run(); err != nil {
			t.Fatal(err)
		}
		for r := range 2 {
			got := make([]float32, outN/4)
			if err := outBuf.ReadF32(int64(r)*per, got); err != nil {
				t.Fatal(err)
			}
			if first == nil {
				first = got
			}
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(first[i]) || math.IsNaN(float64(got[i])) {
					t.Fatalf("run %d, recording %d: value %d is %g, first run's %g", run, r, i, got[i], first[i])
				}
			}
		}
	}
}

// TestFlashAttnPairsUnstaged runs a plan whose lanes load two values at a
// time (head dim 80 over 8 lanes a row), which never stages, even when
// asked to: the staged tile is written and read in whole vec4s. (A version
// that staged such plans, two lanes filling one vec4, got them wrong.)
func TestFlashAttnPairsUnstaged(t *testing.T) {
	in := inputs{dim: 80, gqa: 1, kvHeads: 1, kv: 4097, queries: 16}
	fa, err := New(setup(t), Options{Wave: 64, Prefs: attention.Prefs{Br: 8, Stage: attention.StageOn}})
	if err != nil {
		t.Fatal(err)
	}
	defer fa.Close()
	p, err := fa.Plan(Shape{Queries: in.queries, Heads: in.heads(), KVHeads: in.kvHeads, HeadDim: in.dim, Context: in.context()})
	if err != nil {
		t.Fatal(err)
	}
	if p.Chunk != 2 || p.Stage {
		t.Fatalf("plan %v: want unstaged chunks of 2", p)
	}
	expect(t, []tc{{in, variant{8, 64, 1, attention.StageOn, 0, 0}}})
}
