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
	Br int // query positions per workgroup: 1, 8 or 16
	// Bc is the keys per tile: 8, 16, 32 or 64; in decode (Br 1) the keys
	// per step of the workgroup, Slots × 1, 2, 4, 8 or 16.
	Bc     int
	Splits int // KV splits per query block (1 = no split-k), at most MaxSplits
	// Heads is the q-heads per workgroup: a divisor of the GQA group, at
	// most 16 in decode (the kernel pads a step's scores to a power of two
	// of heads, up to 16).
	Heads int
	// Groups is the lane groups per workgroup in decode (a power of two);
	// prefill workgroups are always one.
	Groups int
	// Chunk is the f16 values per load in decode: 8 or 4 (a key slot is
	// then one lane per chunk of a K row, within the subgroup). Prefill
	// takes the widest that splits its rows evenly.
	Chunk int
	// Stage overrides the policy's choice of staging K and V in shared
	// memory (Plan.Stage) in prefill, where staging still needs the tile to
	// fit and 4 or more values per load; decode never stages, and asking it
	// to is an error.
	Stage StagePref
}

// StagePref is a choice of Plan.Stage.
type StagePref int

const (
	StageAuto StagePref = iota // the policy's
	StageOff
	StageOn
)

// MaxSplits bounds the split-k count: the merge reads every split's partial
// output, so more splits than this cost more than they hide.
const MaxSplits = 256

// Plan is the geometry of one flash-attention dispatch. It maps directly to
// the kernel's specialization constants and workgroup counts.
//
// A workgroup is one lane group of Wave.W lanes (in decode Groups of them:
// Lanes()). It owns Rows() = Br×Heads
// query rows (Br consecutive positions of Heads q-heads that share one KV
// head) and walks its KV range in tiles of Bc keys. The lanes form Slots
// slots of LanesPerSlot lanes, and each lane of a slot owns its share of the
// head dims (in chunks of Chunk f16 values), holding Q and O for them in
// registers. Dot products reduce over the LanesPerSlot lanes of a slot, which
// lie in one hardware subgroup, by subgroup operations.
//
// With Br > 1 (flash_attn.comp) a slot owns one row. With Br = 1 (decode,
// flash_attn_decode.comp: Decode()) each lane holds its dims for all the
// workgroup's heads and a slot owns keys instead: it reads one K and V row
// at a time for every head, Bc/Slots keys per step; the slots of all the
// workgroup's lane groups share its keys.
type Plan struct {
	Wave         WaveChoice
	HeadDim      int
	Br           int
	Heads        int
	Bc           int
	Splits       int
	Mask         bool
	Groups       int // lane groups per workgroup: 1, or in decode a power of two
	MergeHeads   int // decode: heads the key slots merge at a time at the end
	Slots        int // rows: a power of two >= Rows(), at most Wave.W; decode: key slots
	LanesPerSlot int // Lanes() / Slots
	Chunk        int // f16 values per load: 8, 4 or 2
	// Stage converts each tile's K, then V, once into shared memory as
	// f32 for all the workgroup's rows, instead of every row slot loading
	// and converting its own copy (only with Chunk >= 4, never in decode).
	Stage       bool
	SharedBytes int // shared memory the kernel declares
}

// Decode reports whether the plan runs flash_attn_decode.comp: one query
// row per workgroup, slots owning keys.
func (p Plan) Decode() bool { return p.Br == 1 }

// Shader is the kernel the plan runs.
func (p Plan) Shader() string {
	if p.Decode() {
		return "flash_attn_decode"
	}
	return "flash_attn"
}

// Lanes is the workgroup size: Groups lane groups of Wave.W.
func (p Plan) Lanes() int { return p.Wave.W * max(p.Groups, 1) }

// Rows is the number of query rows a workgroup owns.
func (p Plan) Rows() int { return p.Br * p.Heads }

// DimsPerLane is the register footprint of one row's Q (and of its O) in each
// lane, in floats.
func (p Plan) DimsPerLane() int {
	chunks := p.HeadDim / p.Chunk
	return ceilDiv(chunks, p.LanesPerSlot) * p.Chunk
}

// Workgroups is the dispatch size for a shape: query blocks, KV-head groups,
// splits.
func (p Plan) Workgroups(s Shape) (x, y, z int) {
	return ceilDiv(s.Queries, p.Br), s.KVHeads * (s.Heads / s.KVHeads / p.Heads), p.Splits
}

func (p Plan) String() string {
	slots, stage := "rows", ""
	if p.Decode() {
		slots = "key slots"
	}
	if p.Stage {
		stage = " staged"
	}
	groups := ""
	if p.Groups > 1 {
		groups = fmt.Sprintf(" groups=%d", p.Groups)
	}
	if p.MergeHeads > 1 {
		groups += fmt.Sprintf(" merge=%d", p.MergeHeads)
	}
	return fmt.Sprintf("%s Br=%d heads/wg=%d%s Bc=%d splits=%d %s=%d×%d lanes chunk=%d%s shared=%dB",
		p.Wave, p.Br, p.Heads, groups, p.Bc, p.Splits, slots, p.Slots, p.LanesPerSlot, p.Chunk, stage, p.SharedBytes)
}

// Register budget: Q and O of a row take DimsPerLane floats each per lane.
// Up to 64 each keeps a lane under ~160 live floats with the score tile,
// which every target compiles without spilling.
const maxDimsPerLane = 64

// Rows a workgroup owns at most. Prefill takes up to 16 positions and
// groups q-heads while the rows fit the register budget: at wave 64 and head
// dim 128 that is 16 positions × 2 heads in rows of 2 lanes, which on the
// H200 took a 512-query layer at KV 16384 from 10.84 ms (16 rows of 4
// lanes) to 6.17: a lane holds 64 dims and the staged tile serves twice the
// rows.
const maxRows = 32

// maxDecodeHeads bounds Heads in decode: flash_attn_decode.comp pads a
// step's scores to a power of two of heads (HGP), up to 16.
const maxDecodeHeads = 16

// decodeHeads is the most q-heads the policy gives a decode workgroup. Each
// head adds its Q, O and a step's scores to every lane: Qwen3-30B-A3B's 8
// q-heads a KV head took 169 registers on an H100, one workgroup of 256
// lanes an SM, and a layer at KV 4096 and 16384 took 19.2 and 30.5 µs
// against 12.1 and 24.7 with 4 heads (docs/ATTENTION.md). Fewer than 4 read
// each K and V row more times and lose at depth.
const decodeHeads = 4

// decodeLanes is the decode workgroup size the policy aims for: 256 lanes
// (8 lane groups of 32, 4 of 64) make a Llama-3-8B layer at KV 16384 on
// 132 compute units 32 splits of 512 keys. It also keeps a workgroup within
// 32 subgroups of 8 lanes, lavapipe's maxComputeWorkgroupSubgroups.
const decodeLanes = 256

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
//   - Br: decode (one query) → 1, planned by planDecode. Prefill → 16
//     rows when there are at least 16 queries and a row still fits the
//     register budget at this head dim and wave (16 rows × 128 dims at
//     wave32 do; 256 dims need wave64), else 8; the q-heads of a KV head
//     are then grouped while rows stay within the budget and maxRows (2
//     heads × 16 positions at wave 64 and head dim 128).
//   - Bc: 32 keys per tile, 16 when a lane already holds 64 dims of Q and O
//     or the tile is staged in shared memory (prefill, see Stage), 8 when
//     both, smaller while the shared memory would not fit.
//   - Splits: only when the query blocks × KV-head groups cannot fill the
//     device: in decode 512 lanes per compute unit (two workgroups of 256
//     lanes; 32 units assumed when unknown), because decode is latency
//     bound (see autoSplits); in prefill 4
//     workgroups per compute unit; never below 2 tiles of keys per split at
//     KVLen.
func PlanFor(dev Device, w WaveChoice, s Shape, pref Prefs) (Plan, error) {
	if err := s.Check(); err != nil {
		return Plan{}, err
	}
	p := Plan{Wave: w, HeadDim: s.HeadDim, Mask: s.Mask, Groups: 1}
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
	if (pref.Groups != 0 || pref.Chunk != 0) && p.Br != 1 {
		return Plan{}, fmt.Errorf("attention: lane groups and load widths are decode (Br 1) choices")
	}
	if pref.Stage < StageAuto || pref.Stage > StageOn {
		return Plan{}, fmt.Errorf("attention: staging choice %d (want auto, off or on)", pref.Stage)
	}
	var err error
	if p.Br == 1 {
		p, err = planDecode(dev, p, s, pref)
	} else {
		p, err = planRows(dev, p, s, pref, rowCap)
	}
	if err != nil {
		return Plan{}, err
	}
	if group%p.Heads != 0 {
		return Plan{}, fmt.Errorf("attention: %d q-heads per workgroup do not divide the GQA group of %d", p.Heads, group)
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

// largestHeads is the largest divisor of the GQA group up to maxRows that
// fits, or pref when it is set (PlanFor checks that it divides the group).
func largestHeads(group, pref int, fits func(h int) bool) int {
	if pref != 0 {
		return max(pref, 1)
	}
	for h := min(group, maxRows); h > 1; h-- {
		if group%h == 0 && fits(h) {
			return h
		}
	}
	return 1
}

// planRows lays out a plan of Br > 1 rows (flash_attn.comp): Heads, Slots,
// Chunk, Bc and Stage.
func planRows(dev Device, p Plan, s Shape, pref Prefs, rowCap int) (Plan, error) {
	// The largest divisor of the GQA group that keeps the rows within the
	// cap once they are rounded up to a power of two of slots.
	p.Heads = largestHeads(s.Heads/s.KVHeads, pref.Heads, func(h int) bool { return 1<<bits.Len(uint(p.Br*h-1)) <= rowCap })
	// A row's lanes reduce by subgroup operations, so they lie in one
	// hardware subgroup: on subgroups narrower than a row would be, slots
	// past the rows idle.
	p.Slots = max(1<<bits.Len(uint(p.Rows()-1)), p.Wave.W/max(p.Wave.Subgroup, 1))
	if p.Slots > p.Wave.W {
		return Plan{}, fmt.Errorf("attention: %d rows per workgroup exceed wave %d", p.Rows(), p.Wave.W)
	}
	p.LanesPerSlot = p.Wave.W / p.Slots
	// The widest f16 load that splits the head dim evenly over a row's lanes;
	// two values per load when none does (some lanes then idle).
	p.Chunk = 2
	for _, c := range []int{8, 4, 2} {
		if (s.HeadDim/c)%p.LanesPerSlot == 0 {
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
	// Staging pays where several positions share a tile: on the H200 a
	// 512-query layer at KV 16384 took 8.8 ms staged against 19.1 unstaged
	// at wave 32 (10.7 against 15.9 at wave 64). The kernel stages and
	// reads whole vec4s, so only plans loading 4 or 8 values at a time
	// stage.
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
	if pref.Stage != StageOff && p.Chunk >= 4 && staged.sharedBytes() <= dev.sharedMemory() {
		p = staged
	}
	return p, nil
}

// planDecode lays out a Br = 1 plan (flash_attn_decode.comp):
//
//   - Chunk 4 (8-byte loads) and a key slot of one lane per chunk of a K
//     row, up to the hardware subgroup (a slot's reductions are subgroup
//     shuffles) and the wave: 32 lanes for head dim 128 on NVIDIA and RDNA.
//     Lanes past the row's chunks idle (head dim 80). A lane then holds 4
//     dims of each head, not 8 as with 16-byte loads: Q and O take half
//     the registers, which the kernel's loads ahead (the next step's K and
//     V in flight) need. On the H200 16-byte loads with the next K ahead
//     went past 128 registers, where only one workgroup of 256 lanes fits
//     an SM (44.9 µs per Llama-3 layer at KV 16384), and without loads
//     ahead took 34.6 µs; 8-byte loads with K and V ahead take 32.1 (116
//     registers).
//   - Heads: the largest divisor of the GQA group, at most decodeHeads,
//     whose Q and O fit the register budget (Heads × DimsPerLane <= 64),
//     so each K and V row is read and decoded once for all of them; a
//     group with no such divisor but 1 takes the largest that fits.
//   - Bc = Slots × keys per slot and step: 4 keys per slot for lanes of one
//     chunk (2 with two chunks, 1 beyond); halved while the shared memory
//     would not fit.
//   - Groups: lane groups per workgroup, up to decodeLanes lanes while the
//     shared memory fits. The splits that fill the device are then fewer,
//     and the last split's merge of them shorter.
//
// Decode never stages: each key is read by one slot only.
func planDecode(dev Device, p Plan, s Shape, pref Prefs) (Plan, error) {
	if pref.Stage == StageOn {
		return Plan{}, fmt.Errorf("attention: decode (Br 1) does not stage K and V")
	}
	p.Chunk = pref.Chunk
	if p.Chunk == 0 {
		p.Chunk = 4
	}
	if p.Chunk != 8 && p.Chunk != 4 {
		return Plan{}, fmt.Errorf("attention: decode loads of %d f16 values (want 8 or 4)", p.Chunk)
	}
	chunks := s.HeadDim / p.Chunk
	p.LanesPerSlot = min(1<<bits.Len(uint(chunks-1)), p.Wave.W, max(p.Wave.Subgroup, 1))
	fits := func(h int) bool { return h*p.DimsPerLane() <= maxDimsPerLane }
	p.Heads = largestHeads(s.Heads/s.KVHeads, pref.Heads, func(h int) bool { return h <= decodeHeads && fits(h) })
	if p.Heads == 1 && pref.Heads == 0 {
		// A group with no divisor from 2 to decodeHeads (Qwen2's 7): one
		// head a workgroup would read each K and V row 7 times.
		p.Heads = largestHeads(s.Heads/s.KVHeads, 0, fits)
	}
	if p.Heads > maxDecodeHeads {
		return Plan{}, fmt.Errorf("attention: %d q-heads per decode workgroup (at most %d)", p.Heads, maxDecodeHeads)
	}
	ku := max(4/ceilDiv(chunks, p.LanesPerSlot), 1) // keys per slot and step
	layout := func(groups int) {
		p.Groups = groups
		p.Slots = p.Lanes() / p.LanesPerSlot
		p.Bc = pref.Bc
		if p.Bc == 0 {
			p.Bc = p.Slots * ku
		}
	}
	groups := pref.Groups
	if groups == 0 {
		groups = max(min(decodeLanes, dev.maxInvocations())/p.Wave.W, 1)
		for layout(groups); groups > 1 && p.sharedBytes() > dev.sharedMemory(); layout(groups) {
			groups /= 2
		}
	}
	if groups < 1 || groups&(groups-1) != 0 || p.Wave.W*groups > dev.maxInvocations() {
		return Plan{}, fmt.Errorf("attention: %d lane groups of %d per decode workgroup (want a power of two, at most %d lanes)",
			groups, p.Wave.W, dev.maxInvocations())
	}
	layout(groups)
	if pref.Bc == 0 {
		for p.Bc > p.Slots && p.sharedBytes() > dev.sharedMemory() {
			p.Bc /= 2
		}
	}
	// The slots merge as many heads per round as the shared memory holds:
	// a round is two workgroup barriers (on the H200 one head at a time
	// took 1.4 µs of a Llama-3 layer at KV 16384).
	p.MergeHeads = 1
	for hm := 2; hm < 2*p.Heads; hm *= 2 {
		wider := p
		wider.MergeHeads = hm
		if wider.sharedBytes() > dev.sharedMemory() {
			break
		}
		p = wider
	}
	if ku := p.Bc / p.Slots; p.Bc%p.Slots != 0 || ku < 1 || ku > 16 || ku&(ku-1) != 0 {
		return Plan{}, fmt.Errorf("attention: decode Bc %d (want %d key slots × 1, 2, 4, 8 or 16 keys)", p.Bc, p.Slots)
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
	// Decode: 512 lanes per compute unit, two workgroups of 256 lanes (on
	// the H200 a Llama-3-8B layer at KV 16384 took 32.7 µs with 32 splits,
	// 37.8 with 24 and 44.8 with 48, whose 384 workgroups take two waves).
	target := 512 * cus / max(p.Lanes(), 32)
	if !p.Decode() {
		// A prefill workgroup is 8 or 16 rows over the whole KV range: on
		// the H200 a 512-query layer (1024 workgroups, 7.8 per SM) took
		// 3446 µs at KV 8192 unsplit, 3509 with 3 splits and 3539 with 6.
		target = 4 * cus
	}
	if base >= target {
		return 1
	}
	n := min(ceilDiv(target, base), s.KVLen/(2*p.Bc), MaxSplits)
	if n <= 1 {
		return 1
	}
	// Each split takes whole tiles (the kernels' key_range), so a count
	// whose shares round up would leave the last splits empty at KVLen.
	share := ceilDiv(ceilDiv(s.KVLen, n), p.Bc) * p.Bc
	return ceilDiv(s.KVLen, share)
}

// sharedBytes mirrors the kernels' shared declarations. flash_attn.comp:
// the tile's scores per row slot (stride Bc+1); the mask tile with its
// padded stride (Br+1) and one liveness flag per subgroup when a mask is
// bound; the staged K or V tile.
func (p Plan) sharedBytes() int {
	if p.Decode() {
		// Per key slot: the step's weights and a max raise's scores (keys
		// × heads padded to a power of two, each), sharing their array
		// with MergeHeads heads' O for the final merge; and those heads'
		// (m, l).
		// The split merge (split_merge.glsl): a vec4 and an (m, l) per
		// lane, and the last-split flag.
		heads := 1 << bits.Len(uint(p.Heads-1))
		hm := max(p.MergeHeads, 1)
		weights := 2 * p.Bc * heads
		return 4*max(weights, p.Slots*p.HeadDim*hm) + 8*p.Slots*hm + 24*p.Lanes() + 4
	}
	n := 4 * p.Slots * (p.Bc + 1)
	if p.Stage {
		n += 4 * p.Bc * p.HeadDim
	}
	if p.Mask {
		n += 4 * (p.Bc*(p.Br+1) + p.Wave.W/p.Wave.Subgroup)
	}
	return n
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }
