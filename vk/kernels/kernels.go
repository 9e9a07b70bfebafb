// Package kernels records vkinfer's non-attention compute kernels (embedding,
// RMSNorm, RoPE, element-wise ops, KV-cache stores, dequantizing matrix
// products) and the plain causal attention into a *vk.Sequence.
//
// Every method checks its shapes and the sizes of its bindings, fetches (and
// memoises) its pipeline and records one dispatch. Nothing runs until the
// sequence does, and nothing waits: the caller puts s.Barrier() between
// dependent kernels. Values that change from one replay of a sequence to the
// next (token ids, the position pos) are read from buffers, never baked into
// push constants.
//
// Layouts: activations are f32 row-major [n][cols]; weights are the raw GGUF
// bytes of a rows x K tensor (row r at r*rowBytes); the KV cache is f16
// row-major [context][kvDim]; the step buffer holds uint32 pos at offset 0.
package kernels

import (
	"fmt"
	"math"
	"sync"

	"github.com/vkinfer/vkinfer/coopmat"
	"github.com/vkinfer/vkinfer/quant"
	"github.com/vkinfer/vkinfer/shaders"
	"github.com/vkinfer/vkinfer/vk"
)

// Lanes is the workgroup size of the row-wise kernels (RMSNorm, embedding,
// element-wise ops, attention).
const Lanes = 64

// MaxMatVecCols is the most activation columns the matrix-vector kernel
// computes at once. It takes more (up to Kernels.MatVecBatch) a group of
// MaxMatVecCols at a time; the fused decode kernels (MatVecStack) take no
// more.
const MaxMatVecCols = 8

// DefaultMatVecBatch is Kernels.MatVecBatch on a device whose integer dot
// products are native (DefaultQ8's condition). On the H200 the 8-bit
// matrix-vector kernel beats matmul_coopmat (with K in parts,
// CoopSplitFor) on three of the four Llama-3-8B matrices at 24 columns,
// and loses on all four at 28 and 32 (docs/KERNELS.md, "Batches of
// sequences").
// Elsewhere the 8-bit path is a user's choice (--int-dot on), and on GCN
// and RDNA1 its groups of 5 to 8 columns spill registers (docs/AMD.md):
// batches wider than MaxMatVecCols keep the prefill products there.
const DefaultMatVecBatch = 24

// defaultMatVecBatch is MatVecBatch for a device with integer dot
// products, native (accelerated) or not.
func defaultMatVecBatch(integerDot, accelerated bool) int {
	if DefaultQ8(integerDot, accelerated) {
		return DefaultMatVecBatch
	}
	return MaxMatVecCols
}

// MatVecShape is the geometry of the decode matrix-vector kernel.
type MatVecShape struct {
	Lanes int // invocations per workgroup (the lane group)
	Rows  int // rows of the weight matrix per workgroup
	// Unroll is the number of consecutive 32-value slices of each row a
	// lane decodes per step; with Rows it sets the bytes each lane has in
	// flight (and the activations it holds in registers).
	Unroll int
	// Wave is the subgroup size to require of the driver, 0 for its own
	// choice. The kernel is correct for any subgroup size either way.
	Wave int
}

// String is the shape as LlRrUu (lanes, rows, unroll), with wW for a
// required wave; Lanes 0 (matvec_q8's lanes sized by the matrix,
// SizeMatVecQ8) prints as "auto", not as a zero-lane workgroup.
func (s MatVecShape) String() string {
	w := ""
	if s.Wave != 0 {
		w = fmt.Sprintf("w%d", s.Wave)
	}
	lanes := "auto"
	if s.Lanes != 0 {
		lanes = fmt.Sprint(s.Lanes)
	}
	return fmt.Sprintf("%sl%dr%du%s", lanes, s.Rows, s.Unroll, w)
}

// Tile is the geometry of the prefill matrix-matrix kernel: a workgroup
// computes BM weight rows x BN activation columns, each of its
// (BM/TM)*(BN/TN) invocations a TM x TN micro-tile. F16 keeps the
// dequantized weight tile in shared memory as f16 (half the space, weights
// rounded to 11 significant bits) instead of f32. X16 does the same for
// the staged activations (each x rounded to 11 significant bits; values
// beyond f16 range, 65504, become infinities, so it suits models whose
// activations stay below that). KB is how many values of k each staged
// activation chunk holds: 16, 32 or 64, 0 meaning 32; a smaller chunk
// takes less shared memory and more barriers.
type Tile struct {
	BM, BN, TM, TN int
	F16            bool
	X16            bool
	KB             int
}

func (t Tile) String() string {
	p := "f32"
	if t.F16 {
		p = "f16"
	}
	s := fmt.Sprintf("%dx%d/%dx%d/%s", t.BM, t.BN, t.TM, t.TN, p)
	if t.X16 {
		s += "/x16"
	}
	if t.KB != 0 && t.KB != defaultChunk {
		s += fmt.Sprintf("/k%d", t.KB)
	}
	return s
}

// Invocations is the workgroup size of the tile.
func (t Tile) Invocations() int { return (t.BM / t.TM) * (t.BN / t.TN) }

// kTile is the K extent of one shared-memory weight tile for type qt:
// whole blocks (256 values for K-quants, 32 for Q8_0/Q4_0), 64 for floats.
// It mirrors BK in matmul.glsl.
func kTile(qt quant.Type) int {
	if isFloat(qt) {
		return 64
	}
	return qt.BlockSize()
}

// defaultChunk is the activation chunk of a tile with KB 0.
const defaultChunk = 32

// chunk is the K extent of one activation chunk for weights of type qt
// (BKB in matmul.glsl): KB, but never more than one weight tile.
func (t Tile) chunk(qt quant.Type) int {
	kb := t.KB
	if kb == 0 {
		kb = defaultChunk
	}
	return min(kb, kTile(qt))
}

// SharedBytes is the shared memory the tile needs for weights of type qt,
// including the 16-byte padding of each row (ASTRIDE, BSTRIDE in
// matmul.glsl).
func (t Tile) SharedBytes(qt quant.Type) int {
	a := 4 * kTile(qt) // bytes of a weight row
	if t.F16 {
		a /= 2
	}
	b := 4 * t.chunk(qt) // bytes of an activation row
	if t.X16 {
		b /= 2
	}
	return t.BM*(a+16) + t.BN*(b+16)
}

// q8Chunk is the activation chunk of matmul_q8 (KC): KB, 0 meaning 64,
// never more than one weight tile.
func (t Tile) q8Chunk(qt quant.Type) int {
	kc := t.KB
	if kc == 0 {
		kc = 64
	}
	return min(kc, kTile(qt))
}

// Q8SharedBytes is the shared memory of the tile in matmul_q8 for weights
// of type qt: per weight row a byte per value and an (a, c) pair per 16
// values, per activation column a byte per value and a (d, sum) pair per 16,
// each row of bytes padded by 16.
func (t Tile) Q8SharedBytes(qt quant.Type) int {
	au, bu := kTile(qt)/16, t.q8Chunk(qt)/16
	return t.BM*((au+1)*16+au*8) + t.BN*((bu+1)*16+bu*8)
}

// Kernels records kernels for one device.
type Kernels struct {
	dev  *vk.Device
	info vk.DeviceInfo
	// dummy is bound where a shader declares a buffer that a variant does
	// not use (rms_norm without its q8 copy). dummyIn is the same for
	// inputs (RoPE without frequency factors, a norm or product without
	// a residual): a buffer no binding ever writes, because the
	// synchronization validation counts a declared binding as accessed
	// whether or not the variant touches it, and one dispatch that "wrote"
	// dummy followed by an independent one that "read" it, with no
	// barrier between (the Q and K head norms), was a reported hazard.
	// Both are made on first use (unused, unusedInput), so that kernels
	// which only list their pipelines (the engine's Plan, on devices that
	// cannot allocate) allocate nothing.
	dummyMu        sync.Mutex
	dummy, dummyIn *vk.Buffer
	// counts holds zeroed counters (MatVecStack's q8 blocks), taken by
	// recordings from the last block (countsUsed words of it are taken);
	// dummyMu guards them too.
	counts     []*vk.Buffer
	countsUsed int

	// MatVec and Tile are the shapes MatMul uses; callers (a tuning sweep)
	// may change them between recordings.
	MatVec MatVecShape
	Tile   Tile
	TileQ8 Tile // MatMul's tile with 8-bit activations (MatMulQ8)
	// MatVecQ8 is the shape of the 8-bit matrix-vector product; Lanes 0
	// sizes the workgroup by the row length (MatVecQ8For).
	MatVecQ8 MatVecShape
	// Q8 makes matrix products take 8-bit activations (QuantizeQ8, then
	// MatVecQ8With in decode and MatMulQ8 in prefill) for the weight types
	// that have them; the engine reads it (UseQ8).
	Q8 bool
	// CoopMat is the cooperative-matrix shape the prefill products use
	// (the engine sets it from coopmat.Choose and Options.CoopMat); a
	// choice that is not On (zero shapes, only a Reason) keeps the scalar
	// kernels.
	CoopMat coopmat.Choice
	// CoopEmulated runs the cooperative-matrix products on coopmat.glsl's
	// software emulation: what tests check the kernels' logic with on
	// devices without the extension. The engine never sets it.
	CoopEmulated bool
	// CoopTiled is the cooperative-matrix product's tile (a tuning
	// profile's); zero keeps the built-in choice (CoopTileFor).
	CoopTiled CoopTile
	// CoopInt8 runs the cooperative-matrix products whose weights
	// HasCoopInt8 takes on the integer variant (MatMulCoopInt8: 8-bit
	// activations, int8 fragments of the shape CoopMat.Int8); the engine
	// sets it for --coopmat int8 and reads it (UseCoopInt8).
	CoopInt8 bool
	// MatVecBatch is, with Q8, the most activation columns whose products
	// run on the matrix-vector kernels (MaxMatVecCols at a time) rather
	// than the prefill kernels: a batch of sequences decoding together
	// reads each weight once either way, the 8-bit kernel costs little per
	// column, and the prefill tiles are made for hundreds of columns. The
	// f32 kernel costs several times more per column, so without Q8 the
	// products of more than MaxMatVecCols columns are prefill's.
	MatVecBatch int
	// NarrowCoop sends the products of MaxMatVecCols < n <= NarrowCoopCols
	// columns, on devices with cooperative matrices, to matvec_coopmat
	// (UseMatVecCoop) instead of the matrix-vector kernels or
	// matmul_coopmat: the weights streamed once, the products on the
	// matrix units. Off until measured on the H200.
	NarrowCoop bool
}

// New prepares kernels for d, with the built-in shapes for it (Defaults).
// It allocates nothing.
func New(d *vk.Device) *Kernels {
	info := d.Info()
	mv, tile, tileQ8 := Defaults(info.SharedMemory, info.MaxWorkgroupInvocations)
	return &Kernels{dev: d, info: info, MatVec: mv, Tile: tile, TileQ8: tileQ8, MatVecQ8: defaultMatVecQ8,
		Q8: DefaultQ8(info.IntegerDot, info.DotAccelerated), MatVecBatch: defaultMatVecBatch(info.IntegerDot, info.DotAccelerated)}
}

// MatVecTakes says whether products of n activation columns run on the
// matrix-vector kernels (MatVecWith, MatVecQ8With, MatVecAdd): not those
// that NarrowCoop sends to the matrix units.
func (k *Kernels) MatVecTakes(n int) bool {
	return n <= MaxMatVecCols || k.Q8 && n <= k.MatVecBatch && !k.narrowCoop(n)
}

// unused is the binding for a buffer a shader declares and the variant
// being recorded does not read.
func (k *Kernels) unused() (vk.Binding, error) { return k.placeholder(&k.dummy) }

// unusedInput is the binding for an input a shader declares and the
// variant being recorded does not read (see dummyIn).
func (k *Kernels) unusedInput() (vk.Binding, error) { return k.placeholder(&k.dummyIn) }

func (k *Kernels) placeholder(b **vk.Buffer) (vk.Binding, error) {
	k.dummyMu.Lock()
	defer k.dummyMu.Unlock()
	if *b == nil {
		nb, err := k.dev.NewBuffer(16, false)
		if err != nil {
			return vk.Binding{}, fmt.Errorf("kernels: %w", err)
		}
		*b = nb
	}
	return vk.Binding{Buf: *b}, nil
}

// TileQ8For is matmul_q8's tile for a batch of n activation columns:
// k.TileQ8, except where the batch would fill at most half its columns: a
// wide tile then computes mostly idle columns, and a narrower one
// (narrowQ8Tiles) runs more workgroups over the rows instead.
func (k *Kernels) TileQ8For(n int) Tile {
	for _, t := range narrowQ8Tiles {
		if n <= t.cols && 2*t.cols <= k.TileQ8.BN {
			return t.tile
		}
	}
	return k.TileQ8
}

// MatVecQ8For is the shape of the 8-bit matrix-vector product of a rows x K
// matrix: k.MatVecQ8 as SizeMatVecQ8 sizes it.
func (k *Kernels) MatVecQ8For(rows, K int) MatVecShape { return k.SizeMatVecQ8(k.MatVecQ8, rows, K) }

// SizeMatVecQ8 is sh for a rows x K matrix, where Lanes 0 means the fewest
// of 32, 64 or 128 lanes that leave each lane at most five 32-value slices
// of a row and give the whole dispatch at least 256 lanes per compute unit,
// and no fewer than the subgroup size sh requires (whole subgroups). A
// tuning sweep measures shapes other than k.MatVecQ8 with it.
func (k *Kernels) SizeMatVecQ8(sh MatVecShape, rows, K int) MatVecShape {
	if sh.Lanes == 0 {
		sh.Lanes = matVecLanes(rows, K, max(sh.Rows, 1), k.info.ComputeUnits, k.info.MaxWorkgroupInvocations, sh.Wave)
	}
	return sh
}

// matVecLanes is MatVecQ8For's choice, at least least lanes;
// computeUnits 0 (unknown) counts as 32.
func matVecLanes(rows, K, rowsPerGroup, computeUnits, maxInvocations, least int) int {
	if computeUnits == 0 {
		computeUnits = 32
	}
	groups := ceil(rows, rowsPerGroup)
	lanes := max(32, least)
	for lanes < 128 && (K/32 > 5*lanes || groups*lanes < 256*computeUnits) {
		lanes *= 2
	}
	return min(lanes, maxInvocations)
}

// UseQ8 says whether products with weights of type t take 8-bit
// activations.
func (k *Kernels) UseQ8(t quant.Type) bool { return k.Q8 && HasQ8(t) }

// Close frees what the recordings allocated. Pipelines belong to the
// device.
func (k *Kernels) Close() {
	for _, b := range append([]*vk.Buffer{k.dummy, k.dummyIn}, k.counts...) {
		if b != nil {
			b.Free()
		}
	}
}

// spec describes the pipeline of shader name with the given specialization
// constants (constant_id 0 is always the workgroup size) and required
// subgroup size (0: the driver's choice).
func spec(name string, bindings, pushSize, wave int, constants ...uint32) vk.PipelineSpec {
	return vk.PipelineSpec{Name: name, SPIRV: shaders.SPIRV(name), Bindings: bindings, PushSize: pushSize,
		Spec: constants, SubgroupSize: wave}
}

// pipeline returns the pipeline of s; the device memoises it. Every
// recording method builds the pipeline its exported …Spec method
// describes, so that a list of specs (the engine's Plan) is what the
// recordings build.
func (k *Kernels) pipeline(s vk.PipelineSpec) (*vk.Pipeline, error) {
	p, err := k.dev.Pipeline(s)
	if err != nil {
		return nil, fmt.Errorf("kernels: pipeline %s %v: %w", s.Name, s.Spec, err)
	}
	return p, nil
}

// subgroups is the most subgroups a workgroup of n invocations can hold:
// the size of the shared-memory stage of reduce.glsl.
func (k *Kernels) subgroups(n int) uint32 { return uint32(ceil(n, int(k.narrowest()))) }

// narrowest is the narrowest subgroup the device runs.
func (k *Kernels) narrowest() uint32 {
	n := k.info.MinSubgroupSize
	if n <= 0 {
		n = k.info.SubgroupSize
	}
	return uint32(max(n, 1))
}

// GridLimit is the Vulkan minimum of maxComputeWorkGroupCount in each
// dimension: a grid of at most this many workgroups along x, y or z runs on
// every device. grid folds at it, so that grids fold alike everywhere; the
// engine keeps kernels whose rows go along y (HeadRope, Router) to it.
const GridLimit = 65535

// gridX is the widest x extent grid uses.
const gridX = GridLimit

// grid folds a count of workgroups into x*y; shaders recover the linear
// index and skip the excess.
func (k *Kernels) grid(groups int) (x, y uint32) {
	if groups <= gridX {
		return uint32(groups), 1
	}
	return gridX, uint32(ceil(groups, gridX))
}

// positive checks that every dimension is at least 1 and that their product
// fits the 32-bit indices of the shaders.
func positive(op string, dims ...int) error {
	prod := int64(1)
	for _, d := range dims {
		if d < 1 {
			return fmt.Errorf("kernels: %s: dimensions %v must be positive", op, dims)
		}
		prod *= int64(d)
		if prod > math.MaxUint32 {
			return fmt.Errorf("kernels: %s: dimensions %v overflow 32-bit indexing", op, dims)
		}
	}
	return nil
}

func ceil(a, b int) int { return (a + b - 1) / b }

func round4(n int64) int64 { return (n + 3) &^ 3 }

// f32 is the byte size of n float32 values.
func f32(n int) int64 { return 4 * int64(n) }

// need checks a binding (see vk.Binding.Check) with the package's prefix.
func need(what string, b vk.Binding, n int64) error {
	if err := b.Check(what, n); err != nil {
		return fmt.Errorf("kernels: %w", err)
	}
	return nil
}
