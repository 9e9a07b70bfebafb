package tune

import (
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/vkinfer/vkinfer/coopmat"
	"github.com/vkinfer/vkinfer/vk"
	"github.com/vkinfer/vkinfer/vk/kernels"
)

// Kernel names, as --kernels takes them. The _q8 ones are the products on
// 8-bit activations (integer dot products), which the engine runs instead
// of the f32 ones for quantized weights on most GPUs (kernels.DefaultQ8);
// matmul_coopmat is the prefill product on cooperative matrices, which the
// engine runs instead of both where the cooperative-matrix policy is on
// (kernels.UseCoop).
const (
	KernelMatMul     = "matmul"
	KernelMatVec     = "matvec"
	KernelMatMulQ8   = "matmul_q8"
	KernelMatVecQ8   = "matvec_q8"
	KernelMatMulCoop = "matmul_coopmat"
	KernelAttention  = "attention"
)

// Kernels lists the kernels a sweep can measure.
var Kernels = []string{KernelMatMul, KernelMatVec, KernelMatMulQ8, KernelMatVecQ8, KernelMatMulCoop, KernelAttention}

// takesQ8 reports whether kernel reads its activations in the q8 layout
// (kernels.QuantizeQ8); only devices with integer dot products run it.
func takesQ8(kernel string) bool { return kernel == KernelMatMulQ8 || kernel == KernelMatVecQ8 }

// decodes reports whether kernel is a matrix-vector product: one column,
// bound by reading the weights.
func decodes(kernel string) bool { return kernel == KernelMatVec || kernel == KernelMatVecQ8 }

// Options configure a sweep.
type Options struct {
	Kernels []string // subset of Kernels; empty means all
	Reps    int      // timed repetitions per cell (after one warm-up run)
	// Quick shrinks the problem (matrices capped at 256x512, 32 prefill
	// columns, 16 prefill queries, KV lengths 64 and 256) and the variant
	// lists, for software rasterisers and smoke tests.
	Quick bool
	Log   io.Writer // one line per cell; nil discards

	// The variant lists; nil takes the defaults (smaller with Quick). The
	// built-in default of each kernel is always added.
	Tiles     []kernels.Tile
	MatVecs   []kernels.MatVecShape
	TilesQ8   []kernels.Tile        // of matmul_q8: BM, BN, TM, TN and KB count
	MatVecsQ8 []kernels.MatVecShape // of matvec_q8: Lanes 0 is sized per matrix
	// TilesCoop are matmul_coopmat's tiles; the zero tile is the built-in
	// choice, a tile per weight type (kernels.CoopTileFor).
	TilesCoop []kernels.CoopTile
	Decode    []Attention
	Prefill   []Attention
	// Problem sizes; zero takes the defaults.
	KVLens  []int // attention KV lengths (default 4096 and 16384)
	Columns int   // prefill matmul activation columns (default 512)
	Queries int   // prefill attention queries (default 512)

	// Tests plant deliberately wrong kernels here, by kernel name, to show
	// that parity rejects them; pretend that the device lacks integer dot
	// products; and run matmul_coopmat on its software emulation
	// (kernels.Kernels.CoopEmulated) on devices whose cooperative-matrix
	// policy is off (lavapipe), which the engine never does.
	extra        map[string][]matVariant
	noIntegerDot bool
	coopEmulated bool
}

// Cell is one measured variant of one kernel on one shape.
type Cell struct {
	Variant string  `json:"variant"`
	Ref     bool    `json:"reference,omitempty"` // what "vs ref" compares with
	Default bool    `json:"default,omitempty"`   // the built-in default
	Millis  float64 `json:"ms,omitempty"`        // median GPU time of one dispatch
	Rate    float64 `json:"rate,omitempty"`      // in the table's unit
	VsRef   float64 `json:"vs_ref,omitempty"`    // ref time / time - 1: +0.26 is 26% faster
	MaxErr  float64 `json:"max_err"`             // parity: max |diff| / magnitude
	Bound   float64 `json:"bound"`               // ... must stay within this
	Status  string  `json:"status"`              // ok, parity, or why it could not run
	Winner  bool    `json:"winner,omitempty"`    // fastest ok cell of its table
	// Fallback marks a cell not run because the variant does not take
	// the shape's weights, where the engine runs the built-in default
	// instead (a matmul_coopmat tile whose K step holds no whole run of
	// the type's pieces): the choice counts the default's time here.
	Fallback bool `json:"fallback,omitempty"`
}

// Cell statuses besides an error message.
const (
	StatusOK     = "ok"
	StatusParity = "parity"
)

// OK reports whether c ran and passed parity.
func (c Cell) OK() bool { return c.Status == StatusOK }

// Table is every variant of one kernel on one shape.
type Table struct {
	Kernel string `json:"kernel"` // matmul, matvec, decode attention, prefill attention
	Shape  string `json:"shape"`
	Unit   string `json:"unit"`   // GFLOPS or GB/s
	Weight int    `json:"weight"` // how much this shape counts in the overall choice
	Cells  []Cell `json:"cells"`
}

// Report is the result of a sweep.
type Report struct {
	Device  string   `json:"device"`
	Driver  string   `json:"driver"`
	Timer   string   `json:"timer"` // gpu timestamps or wall clock
	Reps    int      `json:"reps"`
	Model   string   `json:"model"`
	Tables  []Table  `json:"tables"`
	Profile *Profile `json:"profile"`
	// Unchosen names the kernels for which no variant passed everywhere;
	// they keep the built-in defaults.
	Unchosen []string `json:"unchosen,omitempty"`
	// Notes say what the sweep left out and why (kernels the device cannot
	// run, matrices a kernel does not take).
	Notes []string `json:"notes,omitempty"`
}

// sweeper holds what every cell needs.
type sweeper struct {
	dev   *vk.Device
	o     Options
	timed bool     // the device writes timestamps
	notes []string // for Report.Notes
	// coop is the device's cooperative-matrix policy (coopmat.Choose), as
	// the engine takes it by default; off but for its Reason where it is
	// off.
	coop coopmat.Choice
}

// newKernels returns Kernels for a sweep: the built-in shapes, with the
// device's cooperative-matrix choice (or the emulation tests ask for).
func (sw *sweeper) newKernels() *kernels.Kernels {
	k := kernels.New(sw.dev)
	k.CoopMat, k.CoopEmulated = sw.coop, sw.o.coopEmulated
	return k
}

// coopOn reports whether the device runs matmul_coopmat at all.
func (sw *sweeper) coopOn() bool { return sw.coop.On() || sw.o.coopEmulated }

// note records a line for the report's notes and logs it.
func (sw *sweeper) note(format string, args ...any) {
	n := fmt.Sprintf(format, args...)
	sw.notes = append(sw.notes, n)
	fmt.Fprintf(sw.o.Log, "tune: %s\n", n)
}

// integerDot reports whether the device runs the _q8 kernels at all.
func (sw *sweeper) integerDot() bool { return sw.dev.Info().IntegerDot && !sw.o.noIntegerDot }

// Sweep measures the kernels of o on dev for the shapes of m and returns
// the tables and a profile of the winners (keyed for dev). dev should be
// opened without the validation layer: it slows every dispatch.
func Sweep(dev *vk.Device, m Model, o Options) (*Report, error) {
	if o.Reps < 1 {
		return nil, fmt.Errorf("tune: %d repetitions, want at least 1", o.Reps)
	}
	if len(o.Kernels) == 0 {
		o.Kernels = Kernels
	}
	for _, k := range o.Kernels {
		if !slices.Contains(Kernels, k) {
			return nil, fmt.Errorf("tune: unknown kernel %q (valid: %s)", k, strings.Join(Kernels, ", "))
		}
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.Quick {
		m = m.Capped(256, 512)
	}
	info := dev.Info()
	sw := &sweeper{dev: dev, o: o, timed: info.TimestampValid, coop: coopmat.Choose(kernels.CoopDevice(info))}
	if !sw.coop.On() {
		sw.coop = coopmat.Choice{Reason: sw.coop.Reason}
	}
	dev.SetProfiling(sw.timed)
	defer dev.SetProfiling(false)
	r := &Report{Device: info.Name, Driver: info.Driver, Reps: o.Reps, Model: m.Name, Timer: "gpu timestamps"}
	if !sw.timed {
		r.Timer = "wall clock (the device writes no timestamps)"
	}
	p := &Profile{Format: Format, Key: KeyOf(info), Created: time.Now().UTC(), Model: m.Name}
	if slices.ContainsFunc(o.Kernels, takesQ8) && sw.integerDot() && !kernels.DefaultQ8(info.IntegerDot, info.DotAccelerated) {
		sw.note("%s does not accelerate packed integer dot products: the engine keeps f32 activations there unless run with --int-dot on, "+
			"so the profile's matmul_q8 and matvec_q8 sections apply only then", info.Name)
	}
	for _, k := range o.Kernels {
		if takesQ8(k) && !sw.integerDot() {
			// Not an error: the default sweep lists every kernel, and the
			// engine never runs this one on such a device.
			sw.note("%s not run: %s lacks integer dot products (shaderIntegerDotProduct)", k, info.Name)
			continue
		}
		if k == KernelMatMulCoop && !sw.coopOn() {
			// Likewise: the engine keeps the scalar kernels there.
			sw.note("%s not run: %s %s", k, info.Name, sw.coop.Reason)
			continue
		}
		var err error
		switch k {
		case KernelMatMul:
			err = sw.matmul(m, r, p)
		case KernelMatVec:
			err = sw.matvec(m, r, p)
		case KernelMatMulQ8:
			err = sw.matmulQ8(m, r, p)
		case KernelMatVecQ8:
			err = sw.matvecQ8(m, r, p)
		case KernelMatMulCoop:
			err = sw.matmulCoop(m, r, p)
		case KernelAttention:
			err = sw.attention(m, r, p)
		}
		if err != nil {
			return nil, err
		}
	}
	r.Profile, r.Notes = p, sw.notes
	return r, nil
}

// run measures one cell: it records the kernel with rec, runs it once
// (warm-up: pipelines, caches, clocks), checks the result with check, and
// only when that passes times o.Reps runs and takes the median. per is the
// number of dispatches of the kernel one run holds. clear, run before the
// warm-up, poisons the output so that a variant that writes nothing cannot
// pass on its predecessor's result.
// warmup is how long a cell's sequence runs before it is timed.
const warmup = 20 * time.Millisecond

func (sw *sweeper) run(c *Cell, per int, clear func() error, rec func(s *vk.Sequence) error, check func() (float64, error)) error {
	s := sw.dev.NewSequence()
	defer s.Free()
	if err := rec(s); err != nil {
		c.Status = err.Error() // geometry the device cannot run
		return nil
	}
	if err := s.End(); err != nil {
		return err
	}
	if err := clear(); err != nil {
		return err
	}
	if err := s.Run(); err != nil {
		return err
	}
	e, err := check()
	if err != nil {
		return err
	}
	// An output that is NaN or was never written counts as the largest
	// error there is (a finite one, so that JSON can carry it).
	if math.IsNaN(e) || e > math.MaxFloat64 {
		e = math.MaxFloat64
	}
	c.MaxErr = e
	if !(e <= c.Bound) { // NaN fails too
		c.Status = StatusParity
		return nil
	}
	// Warm up before timing: a GPU left idle by the host-side work between
	// cells (uploads, parity checks) runs its first dispatches at low
	// clocks, which made whole tables read 3x slow on an H200.
	for start := time.Now(); time.Since(start) < warmup; {
		if err := s.Run(); err != nil {
			return err
		}
	}
	samples := make([]float64, sw.o.Reps)
	for i := range samples {
		start := time.Now()
		if err := s.Run(); err != nil {
			return err
		}
		samples[i] = float64(time.Since(start).Microseconds())
		if sw.timed {
			samples[i] = 0
			for _, t := range s.Timings() {
				samples[i] += t.Micros
			}
		}
	}
	sort.Float64s(samples)
	c.Millis = samples[len(samples)/2] / 1e3 / float64(per)
	c.Status = StatusOK
	return nil
}

// finish fills the rates and the comparison with the reference and marks
// the table's winner; work is the table's units (flops or bytes) per
// dispatch.
func (t *Table) finish(work float64) {
	ref, best := -1, -1
	for i, c := range t.Cells {
		if !c.OK() {
			continue
		}
		if c.Ref {
			ref = i
		}
		if best < 0 || c.Millis < t.Cells[best].Millis {
			best = i
		}
	}
	for i := range t.Cells {
		c := &t.Cells[i]
		if !c.OK() || c.Millis <= 0 {
			continue
		}
		c.Rate = work / (c.Millis * 1e6) // per ns: G units per second
		if ref >= 0 {
			c.VsRef = t.Cells[ref].Millis/c.Millis - 1
		}
	}
	if best >= 0 {
		t.Cells[best].Winner = true
	}
}

// choose returns the index (into each table's cells, which list the same
// variants in the same order) of the variant with the least weighted time
// over tables, among those that passed on every table; -1 if none did. A
// Fallback cell counts as its table's default cell, which the engine runs
// there instead, but a variant must have run somewhere itself: one that
// falls back everywhere is the default under another name.
func choose(tables []Table) int {
	if len(tables) == 0 {
		return -1
	}
	best, bestT := -1, math.Inf(1)
	for i := range tables[0].Cells {
		total, ran := 0.0, false
		for _, t := range tables {
			c := t.Cells[i]
			if c.Fallback {
				if d := slices.IndexFunc(t.Cells, func(c Cell) bool { return c.Default }); d >= 0 {
					c = t.Cells[d]
				}
			} else {
				ran = ran || c.OK()
			}
			if !c.OK() {
				total = math.Inf(1)
				break
			}
			total += float64(t.Weight) * c.Millis
		}
		if ran && total < bestT {
			best, bestT = i, total
		}
	}
	return best
}

// logCell prints one measured cell as progress.
func (sw *sweeper) logCell(kernel, shape string, c Cell) {
	if c.OK() {
		fmt.Fprintf(sw.o.Log, "tune: %s %s %s: %.4f ms (error %.2g)\n", kernel, shape, c.Variant, c.Millis, c.MaxErr)
		return
	}
	fmt.Fprintf(sw.o.Log, "tune: %s %s %s: %s (error %.2g, bound %.2g)\n", kernel, shape, c.Variant, c.Status, c.MaxErr, c.Bound)
}
