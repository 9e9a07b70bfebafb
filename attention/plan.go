package attention

import (
	"fmt"
	"math/bits"
)

// Shape is one attention dispatch: Queries query rows (positions pos..pos+N-1
// at run time) of Heads query heads attending over the KV cache of KVHeads
// heads of HeadDim values.
type Shape struct {
	Queries int
	Heads   int
	KVHeads int
	HeadDim int
	// KVLen is the longest KV length the dispatch will see. A sequence is
	// recorded once and replayed at every position, so this is usually the
	// context size; it only steers the split-k count.
	KVLen int
	// Mask is true when an additive mask tensor is applied on top of the
	// causal mask.
	Mask bool
}

// Prefs override the policy; zero fields are chosen by it.
type Prefs struct {
	Br     int // query positions per workgroup: 1, 8 or 16
	Bc     int // keys per tile: 8, 16, 32 or 64
	Splits int // KV splits per query block (1 = no split-k), at most MaxSplits
	Heads  int // q-heads per workgroup: a divisor of the GQA group
	// Stage overrides the policy's choice of staging K and V in shared
	// memory (Plan.Stage); staging still needs the tile to fit.
	Stage StagePref
}

// StagePref is a choice of Plan.Stage.
type StagePref int

const (
	StageAuto StagePref = iota // the policy's
	StageOff
	StageOn
)

// MaxSplits bounds the split-k count: the reduce pass reads every split's
// partial output, so more splits than this cost more than they hide.
const MaxSplits = 256

// Plan is the geometry of one flash-attention dispatch. It maps directly to
// the kernel's specialization constants and workgroup counts.
//
// A workgroup is one lane group of Wave.W lanes. It owns Rows() = Br×Heads
// query rows (Br consecutive positions of Heads q-heads that share one KV
// head) and walks its KV range in tiles of Bc keys. The lanes form RowSlots
// slots of LanesPerRow lanes; each slot owns one row, and each lane of a slot
// owns HeadDim/LanesPerRow of its dims (in chunks of Chunk f16 values), so Q
// and O for a row live in the registers of its slot. Dot products reduce over
// the LanesPerRow lanes of a slot: subgroup operations when those lanes lie
// in one hardware subgroup, shared memory when they span several.
type Plan struct {
	Wave        WaveChoice
	HeadDim     int
	Br          int
	Heads       int
	Bc          int
	Splits      int
	Mask        bool
	RowSlots    int // power of two >= Rows(), at most Wave.W
	LanesPerRow int // Wave.W / RowSlots
	Chunk       int // f16 values per load: 8, 4 or 2
	// Stage converts each tile's K, then V, once into shared memory as
	// f32 for all the workgroup's rows, instead of every row slot loading
	// and converting its own copy (only with Chunk >= 4).
	Stage       bool
	SharedBytes int // shared memory the kernel declares
}

// Rows is the number of query rows a workgroup owns.
func (p Plan) Rows() int { return p.Br * p.Heads }

// DimsPerLane is the register footprint of one row's Q (and of its O) in each
// lane, in floats.
func (p Plan) DimsPerLane() int {
	chunks := p.HeadDim / p.Chunk
	return ceilDiv(chunks, p.LanesPerRow) * p.Chunk
}

// CrossSubgroup reports whether a row's dot products reduce through shared
// memory because its lanes span several hardware subgroups.
func (p Plan) CrossSubgroup() bool { return p.LanesPerRow > p.Wave.Subgroup }

// Workgroups is the dispatch size for a shape: query blocks, KV-head groups,
// splits.
func (p Plan) Workgroups(s Shape) (x, y, z int) {
	return ceilDiv(s.Queries, p.Br), s.KVHeads * (s.Heads / s.KVHeads / p.Heads), p.Splits
}

func (p Plan) String() string {
	stage := ""
	if p.Stage {
		stage = " staged"
	}
	return fmt.Sprintf("%s Br=%d heads/wg=%d Bc=%d splits=%d rows=%d×%d lanes chunk=%d%s shared=%dB",
		p.Wave, p.Br, p.Heads, p.Bc, p.Splits, p.RowSlots, p.LanesPerRow, p.Chunk, stage, p.SharedBytes)
}

// Register budget: Q and O of a row take DimsPerLane floats each per lane.
// Up to 64 each keeps a lane under ~160 live floats with the score tile,
// which every target compiles without spilling.
const maxDimsPerLane = 64

// Rows a workgroup owns at most: 16 positions, or in decode 16 q-heads.
const maxRows = 16

// Check validates a shape against what the kernel supports.
func (s Shape) Check() error {
	switch {
	case s.Queries < 1:
		return fmt.Errorf("attention: %d queries", s.Queries)
	case s.Heads < 1 || s.KVHeads < 1 || s.Heads%s.KVHeads != 0:
		return fmt.Errorf("attention: %d heads is not a multiple of %d KV heads", s.Heads, s.KVHeads)
	case s.HeadDim < 8 || s.HeadDim > 256 || s.HeadDim%8 != 0:
		return fmt.Errorf("attention: head dim %d (want a multiple of 8 up to 256)", s.HeadDim)
	case s.KVLen < s.Queries:
		return fmt.Errorf("attention: KV length %d is shorter than the %d queries", s.KVLen, s.Queries)
	}
	return nil
}

// PlanFor chooses the geometry of a dispatch on dev with lane groups w.
//
//   - Br: decode (one query) → 1, and all q-heads sharing a KV head go in one
//     workgroup, so each KV tile is read once for all of them. Prefill → 16
//     rows when there are at least 16 queries and a row still fits the
//     register budget at this head dim and wave (16 rows × 128 dims at
//     wave32 do; 256 dims need wave64), else 8; at Br = 8 the q-heads of a KV
//     head are paired up while rows stay within the budget.
//   - Bc: 32 keys per tile, 16 when a lane already holds 64 dims of Q and O
//     or the tile is staged in shared memory (prefill, see Stage), 8 when
//     both, smaller while the shared memory would not fit.
//   - Splits: only when the query blocks × KV-head groups cannot fill the
//     device: 16 workgroups per compute unit (32 units assumed when unknown),
//     because decode is latency bound and each workgroup is one lane group
//     (on an H100, Llama-3-8B decode at 16k took 252 µs with 32 splits, 73
//     with 128 and 46 with 256); never below 2 tiles of keys per split at
//     KVLen.
func PlanFor(dev Device, w WaveChoice, s Shape, pref Prefs) (Plan, error) {
	if err := s.Check(); err != nil {
		return Plan{}, err
	}
	p := Plan{Wave: w, HeadDim: s.HeadDim, Mask: s.Mask}
	group := s.Heads / s.KVHeads
	rowCap := min(maxRows, maxDimsPerLane*w.W/s.HeadDim)

	p.Br = pref.Br
	switch {
	case p.Br == 0 && s.Queries == 1:
		p.Br = 1
	case p.Br == 0 && s.Queries >= 16 && rowCap >= 16:
		p.Br = 16
	case p.Br == 0:
		p.Br = 8
	case p.Br != 1 && p.Br != 8 && p.Br != 16:
		return Plan{}, fmt.Errorf("attention: Br %d (want 1, 8 or 16)", p.Br)
	}
	if pref.Stage < StageAuto || pref.Stage > StageOn {
		return Plan{}, fmt.Errorf("attention: staging choice %d (want auto, off or on)", pref.Stage)
	}
	// The largest divisor of the GQA group that keeps the rows within the cap.
	p.Heads = pref.Heads
	if p.Heads == 0 {
		p.Heads = 1
		for h := group; h >= 1; h-- {
			if group%h == 0 && p.Br*h <= max(rowCap, p.Br) {
				p.Heads = h
				break
			}
		}
	}
	if p.Heads < 1 || group%p.Heads != 0 {
		return Plan{}, fmt.Errorf("attention: %d q-heads per workgroup do not divide the GQA group of %d", p.Heads, group)
	}
	p.RowSlots = 1 << bits.Len(uint(p.Rows()-1))
	if p.RowSlots > w.W {
		return Plan{}, fmt.Errorf("attention: %d rows per workgroup exceed wave %d", p.Rows(), w.W)
	}
	p.LanesPerRow = w.W / p.RowSlots
	// The widest f16 load that splits the head dim evenly over a row's lanes;
	// two values per load when none does (some lanes then idle).
	p.Chunk = 2
	for _, c := range []int{8, 4, 2} {
		if (s.HeadDim/c)%p.LanesPerRow == 0 {
			p.Chunk = c
			break
		}
	}

	p.Bc = pref.Bc
	if p.Bc == 0 {
		p.Bc = 32
		if p.DimsPerLane() >= maxDimsPerLane {
			p.Bc = 16
		}
		for p.Bc > 8 && p.sharedBytes() > dev.sharedMemory() {
			p.Bc /= 2
		}
	}
	if p.Bc != 8 && p.Bc != 16 && p.Bc != 32 && p.Bc != 64 {
		return Plan{}, fmt.Errorf("attention: Bc %d (want 8, 16, 32 or 64)", p.Bc)
	}
	// Staging pays where several positions share a tile (prefill): on the
	// H200 a 512-query layer at KV 16384 took 8.8 ms staged against 19.1
	// unstaged at wave 32 (10.7 against 15.9 at wave 64). Decode loses:
	// 129 against 72 µs at wave 32, as a staged tile's shared memory halves
	// the workgroups an SM holds, and decode needs them all in flight
	// (StageOn forces it). The kernel stages and reads whole vec4s, so only
	// plans loading 4 or 8 values at a time stage.
	// Staged tiles are small, as registers bound them: at wave 64 (32 dims
	// of Q and O per lane) 32-key tiles took 12.2 ms where 16-key ones
	// took 10.7 (8 keys: the same), and at wave 32 (64 dims per lane)
	// 16-key tiles took 8.7 ms where 8-key ones took 6.95.
	staged := p
	staged.Stage = true
	if pref.Bc == 0 {
		staged.Bc = min(p.Bc, 16)
		if p.DimsPerLane() >= maxDimsPerLane {
			staged.Bc = 8
		}
	}
	if pref.Stage != StageOff && (p.Br > 1 || pref.Stage == StageOn) && p.Chunk >= 4 &&
		staged.sharedBytes() <= dev.sharedMemory() {
		p = staged
	}
	p.SharedBytes = p.sharedBytes()
	if p.SharedBytes > dev.sharedMemory() {
		return Plan{}, fmt.Errorf("attention: %d bytes of shared memory, device has %d", p.SharedBytes, dev.sharedMemory())
	}

	p.Splits = pref.Splits
	if p.Splits == 0 {
		p.Splits = autoSplits(dev, p, s)
	}
	if p.Splits < 1 || p.Splits > MaxSplits {
		return Plan{}, fmt.Errorf("attention: %d splits (want 1..%d)", p.Splits, MaxSplits)
	}
	return p, nil
}

func autoSplits(dev Device, p Plan, s Shape) int {
	cus := dev.ComputeUnits
	if cus == 0 {
		cus = 32
	}
	x, y, _ := p.Workgroups(s)
	base := x * y
	target := 16 * cus
	if base >= target {
		return 1
	}
	n := ceilDiv(target, base)
	n = min(n, s.KVLen/(2*p.Bc), MaxSplits)
	return max(n, 1)
}

// sharedBytes mirrors the kernel's shared declarations: the tile's scores
// per row slot (stride Bc+1); the mask tile with its padded stride (Br+1)
// and one liveness flag per subgroup when a mask is bound; one partial sum
// per key and subgroup when rows span subgroups; the staged K or V tile.
func (p Plan) sharedBytes() int {
	n := 4 * p.RowSlots * (p.Bc + 1)
	if p.Stage {
		n += 4 * p.Bc * p.HeadDim
	}
	sgs := p.Wave.W / p.Wave.Subgroup
	if p.Mask {
		n += 4 * (p.Bc*(p.Br+1) + sgs)
	}
	if p.CrossSubgroup() {
		n += 4 * p.Bc * sgs
	}
	return n
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }
