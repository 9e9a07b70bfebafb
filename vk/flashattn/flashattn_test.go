package flashattn

import (
	"encoding/binary"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"sync"
	"testing"

	"github.com/x448/float16"

	"github.com/vkinfer/vkinfer/attention"
	"github.com/vkinfer/vkinfer/internal/vktest"
	"github.com/vkinfer/vkinfer/vk"
)

var long = flag.Bool("long", false, "TestFlashAttn: run the full cross product of every axis (hours on lavapipe), not the pairwise covering set")

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(vktest.Close(m.Run()))
}

// setup returns the package's shared validated device (lavapipe in CI):
// lavapipe compiles each pipeline once.
func setup(t testing.TB) *vk.Device { return vktest.Shared(t) }

// tc is one kernel configuration of the test matrix.
type tc struct {
	br, wave, dim, gqa, kv, queries int
	split, mask                     bool
}

func (c tc) String() string {
	return fmt.Sprintf("br%d/w%d/d%d/gqa%d/kv%d/q%d/split=%v/mask=%v", c.br, c.wave, c.dim, c.gqa, c.kv, c.queries, c.split, c.mask)
}

// The axes of the check. A KV length is pos+queries, so a case needs
// queries <= kv.
var axes = [][]int{
	{1, 8, 16},               // Br
	{32, 64},                 // W
	{64, 80, 96, 128, 256},   // head dim
	{1, 4, 8},                // GQA ratio
	{1, 17, 255, 1000, 4097}, // KV length
	{1, 7, 16, 100},          // queries
	{0, 1},                   // split-k
	{0, 1},                   // mask
}

func caseOf(v []int) tc {
	return tc{br: v[0], wave: v[1], dim: v[2], gqa: v[3], kv: v[4], queries: v[5], split: v[6] == 1, mask: v[7] == 1}
}

func valid(v []int) bool { return v[5] <= v[4] }

// fullProduct is every valid combination of the axes.
func fullProduct() [][]int {
	out := [][]int{nil}
	for _, axis := range axes {
		var next [][]int
		for _, p := range out {
			for _, x := range axis {
				next = append(next, append(append([]int(nil), p...), x))
			}
		}
		out = next
	}
	var ok [][]int
	for _, v := range out {
		if valid(v) {
			ok = append(ok, v)
		}
	}
	return ok
}

// coveringSet picks cases from the full product, greedily, until every pair of
// values of any two axes that some valid case has appears in a chosen case
// (pairwise coverage). Candidates are shuffled with a fixed seed first, so
// ties spread over the axes' values instead of repeating the first ones, and
// the set is the same on every run.
func coveringSet() [][]int {
	all := fullProduct()
	r := rand.New(rand.NewPCG(4, 4))
	r.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	type pair struct{ i, a, j, b int }
	pairs := func(v []int) []pair {
		var ps []pair
		for i := range v {
			for j := i + 1; j < len(v); j++ {
				ps = append(ps, pair{i, v[i], j, v[j]})
			}
		}
		return ps
	}
	uncovered := map[pair]bool{}
	for _, v := range all {
		for _, p := range pairs(v) {
			uncovered[p] = true
		}
	}
	var chosen [][]int
	for len(uncovered) > 0 {
		best, gain := -1, 0
		for k, v := range all {
			g := 0
			for _, p := range pairs(v) {
				if uncovered[p] {
					g++
				}
			}
			if g > gain {
				best, gain = k, g
			}
		}
		for _, p := range pairs(all[best]) {
			delete(uncovered, p)
		}
		chosen = append(chosen, all[best])
	}
	return chosen
}

// TestFlashAttn checks the kernel against the float64 reference on the same
// f16 K/V, with relative error below 1e-3, over the axes Br × W × head dim ×
// GQA × KV length × queries × split-k × mask. The full product is thousands of
// dispatches, hours on lavapipe's 2 cores, so by default the test runs a
// pairwise covering set (every value of every axis with every value of every
// other, ~3 minutes on lavapipe); -long runs the full product.
func TestFlashAttn(t *testing.T) {
	d := setup(t)
	cases := coveringSet()
	if *long {
		cases = fullProduct()
	}
	t.Logf("%d cases (-long=%v)", len(cases), *long)
	for _, v := range cases {
		c := caseOf(v)
		t.Run(c.String(), func(t *testing.T) {
			got, want, p := runCase(t, d, c, 0)
			e := attention.RelErr(got, want, c.dim)
			t.Logf("%v: rel err %.2e", p, e)
			if e >= 1e-3 {
				t.Errorf("relative error %.3e >= 1e-3 (%v)", e, p)
			}
		})
	}
}

// TestFlashAttnTeeth shows the comparison catches near misses: the kernel's
// output measured against a reference whose causal limit is one key later,
// or that ignores the mask, fails the 1e-3 bound.
func TestFlashAttnTeeth(t *testing.T) {
	d := setup(t)
	causal := tc{br: 8, wave: 32, dim: 64, gqa: 4, kv: 20, queries: 7}
	got, _, _ := runCase(t, d, causal, 0)
	p := problem(causal, 0)
	p.Pos++ // one more key per row: append a KV row for it
	p.K = append(p.K, p.K[:kvHeads*causal.dim]...)
	p.V = append(p.V, p.V[:kvHeads*causal.dim]...)
	wrong, err := attention.Reference(p)
	if err != nil {
		t.Fatal(err)
	}
	if e := attention.RelErr(got, wrong, causal.dim); e < 1e-3 {
		t.Errorf("a reference off by one key passes (rel err %.2e)", e)
	}

	masked := tc{br: 16, wave: 64, dim: 96, gqa: 1, kv: 300, queries: 16, mask: true}
	got, _, _ = runCase(t, d, masked, 0)
	p = problem(masked, 0)
	p.Mask = nil
	if wrong, err = attention.Reference(p); err != nil {
		t.Fatal(err)
	}
	if e := attention.RelErr(got, wrong, masked.dim); e < 1e-3 {
		t.Errorf("a reference without the mask passes (rel err %.2e)", e)
	}
}

// TestFlashAttnPastContext runs a batch whose positions run past the cache:
// the kernel must attend over the keys the cache holds and read nothing
// beyond it (the rows past it are NaN in the test, so a read would show).
func TestFlashAttnPastContext(t *testing.T) {
	d := setup(t)
	for _, split := range []bool{false, true} {
		c := tc{br: 8, wave: 32, dim: 64, gqa: 2, kv: 100, queries: 16, split: split}
		got, want, p := runCase(t, d, c, 10)
		if e := attention.RelErr(got, want, c.dim); e >= 1e-3 {
			t.Errorf("split=%v: relative error %.3e (%v)", split, e, p)
		}
	}
}

// TestFlashAttnManySplits merges many splits, up to attention.MaxSplits,
// where each lane of the reduce pass sums several of them, most of them
// empty at the shorter lengths.
func TestFlashAttnManySplits(t *testing.T) {
	d := setup(t)
	for _, c := range []struct {
		tc
		splits int
	}{
		{tc{br: 1, wave: 32, dim: 80, gqa: 4, kv: 4097, queries: 1}, 40},
		{tc{br: 1, wave: 64, dim: 128, gqa: 8, kv: 1000, queries: 1}, attention.MaxSplits},
		{tc{br: 8, wave: 32, dim: 256, gqa: 1, kv: 255, queries: 7, mask: true}, attention.MaxSplits},
	} {
		got, want, p := runSplitCase(t, d, c.tc, c.splits)
		if e := attention.RelErr(got, want, c.dim); e >= 1e-3 {
			t.Errorf("%v, %d splits: relative error %.3e (%v)", c.tc, c.splits, e, p)
		}
	}
}

const kvHeads = 2 // two KV heads, so the head-group dimension of the grid is exercised

// problem builds the inputs of a case, deterministically from its shape:
// Q ~ U(-2, 2) (peaked enough that a misplaced max shows), K, V ~ U(-1, 1)
// rounded to f16.
func problem(c tc, short int) attention.Problem {
	r := rand.New(rand.NewPCG(uint64(c.dim*131+c.gqa*17+c.kv), uint64(c.queries)))
	heads := c.gqa * kvHeads
	p := attention.Problem{Queries: c.queries, Heads: heads, KVHeads: kvHeads, HeadDim: c.dim,
		Pos: c.kv - c.queries, Scale: 1 / math.Sqrt(float64(c.dim))}
	p.Q = make([]float32, c.queries*heads*c.dim)
	for i := range p.Q {
		p.Q[i] = float32(4*r.Float64() - 2)
	}
	n := c.kv * kvHeads * c.dim
	p.K, p.V = make([]uint16, n), make([]uint16, n)
	for i := range p.K {
		p.K[i] = float16.Fromfloat32(float32(2*r.Float64() - 1)).Bits()
		p.V[i] = float16.Fromfloat32(float32(2*r.Float64() - 1)).Bits()
	}
	if c.mask {
		p.MaskStride = c.kv
		p.Mask = maskFor(c, c.kv, rand.New(rand.NewPCG(uint64(c.kv), 2)))
	}
	if short > 0 {
		// The cache holds only kv-short rows: the reference sees the rest
		// masked out.
		ctx := c.kv - short
		if p.Mask == nil {
			p.MaskStride = c.kv
			p.Mask = make([]float32, c.queries*c.kv)
		}
		for i := 0; i < c.queries; i++ {
			for j := ctx; j < c.kv; j++ {
				p.Mask[i*p.MaskStride+j] = float32(math.Inf(-1))
			}
		}
	}
	return p
}

// maskFor is a random additive mask in f16-exact values: U(-2, 2) with 20%
// -Inf, the second tile of keys fully masked for every query (so tile
// skipping runs), and query row 1 fully masked (its output must be 0).
func maskFor(c tc, stride int, r *rand.Rand) []float32 {
	m := make([]float32, c.queries*stride)
	for i := range m {
		if r.IntN(5) == 0 {
			m[i] = float32(math.Inf(-1))
		} else {
			m[i] = float16.Fromfloat32(float32(4*r.Float64() - 2)).Float32()
		}
	}
	for i := 0; i < c.queries; i++ {
		for j := 32; j < min(64, stride); j++ {
			m[i*stride+j] = float32(math.Inf(-1))
		}
		if i == 1 {
			for j := 0; j < stride; j++ {
				m[i*stride+j] = float32(math.Inf(-1))
			}
		}
	}
	return m
}

// refs caches references: the float64 attention is the slow part at long
// KV, and a reference does not depend on Br, W or split-k.
var (
	refMu sync.Mutex
	refs  = map[string][]float64{}
)

func reference(t testing.TB, c tc, short int, p attention.Problem) []float64 {
	key := fmt.Sprint(c.dim, c.gqa, c.kv, c.queries, c.mask, short)
	refMu.Lock()
	defer refMu.Unlock()
	if r, ok := refs[key]; ok {
		return r
	}
	r, err := attention.Reference(p)
	if err != nil {
		t.Fatal(err)
	}
	refs[key] = r
	return r
}

// runCase runs case c, with 3 splits when c.split (a count that divides none
// of the KV lengths: uneven and empty splits). With short > 0 the cache
// holds kv-short rows while the batch still ends at position kv-1.
func runCase(t testing.TB, d *vk.Device, c tc, short int) ([]float32, []float64, attention.Plan) {
	t.Helper()
	splits := 1
	if c.split {
		splits = 3
	}
	return run(t, d, c, short, splits)
}

// runSplitCase runs case c with the given number of splits.
func runSplitCase(t testing.TB, d *vk.Device, c tc, splits int) ([]float32, []float64, attention.Plan) {
	t.Helper()
	c.split = splits > 1
	return run(t, d, c, 0, splits)
}

// run runs a case on the GPU and returns its output, the reference and the
// plan used.
func run(t testing.TB, d *vk.Device, c tc, short, splits int) ([]float32, []float64, attention.Plan) {
	t.Helper()
	p := problem(c, short)
	want := reference(t, c, short, p)
	fa, err := New(d, Options{Wave: c.wave, Prefs: attention.Prefs{Br: c.br, Splits: splits}})
	if err != nil {
		t.Fatal(err)
	}
	defer fa.Close()
	ctx := c.kv - short
	sh := Shape{Queries: c.queries, Heads: p.Heads, KVHeads: kvHeads, HeadDim: c.dim,
		Context: ctx + 5, Scale: float32(p.Scale), Mask: c.mask}
	if short > 0 {
		sh.Context = ctx
	}
	plan, err := fa.Plan(sh)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Br != c.br || plan.Splits != splits || plan.Wave.W != c.wave {
		t.Fatalf("plan %v does not honour Br %d, splits %d, wave %d", plan, c.br, splits, c.wave)
	}

	// Cache rows past the KV length (and mask entries past it) hold NaN: a
	// kernel that reads them poisons its output.
	kvd := kvHeads * c.dim
	nan := float16.Fromfloat32(float32(math.NaN())).Bits()
	cacheK := make([]uint16, sh.Context*kvd)
	cacheV := make([]uint16, sh.Context*kvd)
	for i := range cacheK {
		cacheK[i], cacheV[i] = nan, nan
	}
	copy(cacheK, p.K[:min(len(p.K), len(cacheK))])
	copy(cacheV, p.V[:min(len(p.V), len(cacheV))])

	q := buffer(t, d, f32Bytes(p.Q))
	k := buffer(t, d, u16Bytes(cacheK))
	v := buffer(t, d, u16Bytes(cacheV))
	outBytes := int64(4 * len(p.Q))
	out := buffer(t, d, make([]byte, outBytes))
	step := buffer(t, d, binary.LittleEndian.AppendUint32(nil, uint32(p.Pos)))
	io := IO{Q: whole(q), K: whole(k), V: whole(v), Out: whole(out), Step: whole(step)}
	if c.mask {
		m := make([]uint16, c.queries*sh.Context)
		for i := range m {
			m[i] = nan
		}
		for i := 0; i < c.queries; i++ {
			for j := 0; j < min(ctx, c.kv); j++ {
				m[i*sh.Context+j] = float16.Fromfloat32(p.Mask[i*p.MaskStride+j]).Bits()
			}
		}
		io.Mask = whole(buffer(t, d, u16Bytes(m)))
	}
	if n, err := fa.ScratchBytes(sh); err != nil {
		t.Fatal(err)
	} else if n > 0 {
		// Poison the partials too: every split must write its rows.
		io.Scratch = whole(buffer(t, d, nanBytes(n)))
	}

	s := d.NewSequence()
	defer s.Free()
	if err := fa.Record(s, io, sh); err != nil {
		t.Fatal(err)
	}
	if err := s.End(); err != nil {
		t.Fatal(err)
	}
	if err := s.Run(); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, len(p.Q))
	if err := out.ReadF32(0, got); err != nil {
		t.Fatal(err)
	}
	return got, want, plan
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
