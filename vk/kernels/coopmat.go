package kernels

import (
	"fmt"

	"github.com/vkinfer/vkinfer/coopmat"
	"github.com/vkinfer/vkinfer/quant"
	"github.com/vkinfer/vkinfer/shaders"
	"github.com/vkinfer/vkinfer/vk"
)

// CoopTile is the geometry of the cooperative-matrix prefill product
// (matmul_coopmat.glsl): a workgroup computes BM weight rows x BN
// activation columns, each of its subgroups a WM x WN part of them as
// fragments of the device's shape (k.CoopMat.F16). BK values of k are
// decoded into shared memory per step (whole runs of dequant.glsl's pieces,
// kSpan), and the activations are staged KC values at a time.
type CoopTile struct {
	BM, BN, WM, WN, BK, KC int
}

func (t CoopTile) String() string {
	return fmt.Sprintf("%dx%d/%dx%d/k%d/c%d", t.BM, t.BN, t.WM, t.WN, t.BK, t.KC)
}

// Subgroups is how many subgroups a workgroup of the tile holds.
func (t CoopTile) Subgroups() int { return (t.BM / max(t.WM, 1)) * (t.BN / max(t.WN, 1)) }

// SharedBytes is the shared memory of the tile with fragments of m x n
// accumulators: the f16 weight and activation stages (rows padded by 16
// bytes) and one f32 fragment per subgroup for the output.
func (t CoopTile) SharedBytes(m, n int) int {
	return 2*t.BM*(t.BK+8) + 2*t.BN*(t.KC+8) + 4*t.Subgroups()*m*n
}

// defaultCoopTiles in order of preference: the first that holds whole
// runs of the weight type's pieces, fits the device's shared memory and
// workgroup size, and gives the matrix enough workgroups (CoopTileForShape)
// is the built-in one. On the H200 (BenchmarkMatMulCoop, docs/KERNELS.md),
// with 512 columns: 128x256 tiles ran the 14336-row gate and up matrices
// at 100 TFLOP/s, but leave the 4096-row ones too few workgroups, which
// ran fastest on 128x128 tiles of eight 64x32 parts with 64 values of k
// per step (86-98). Q6_K takes the tiles of Q4_K since the stage cuts it
// into 64-value runs too (f16stage.glsl); the tiles of 128-value steps are
// for devices and shapes the others do not fit. The 64x128 tile of eight
// 32x32 parts serves the matrices of 2048 rows, which the 128-row tiles
// leave too few workgroups (Qwen3-30B-A3B's o projection), and the 64x64
// ones matrices too small to fill the GPU with the others.
var defaultCoopTiles = []CoopTile{
	{BM: 128, BN: 256, WM: 64, WN: 64, BK: 64, KC: 32},
	{BM: 128, BN: 128, WM: 64, WN: 32, BK: 64, KC: 64},
	{BM: 128, BN: 128, WM: 64, WN: 32, BK: 128, KC: 16},
	{BM: 64, BN: 128, WM: 32, WN: 32, BK: 64, KC: 64},
	{BM: 64, BN: 128, WM: 32, WN: 64, BK: 128, KC: 32},
	{BM: 64, BN: 64, WM: 32, WN: 32, BK: 64, KC: 64},
	{BM: 64, BN: 64, WM: 32, WN: 32, BK: 128, KC: 64},
	{BM: 64, BN: 128, WM: 32, WN: 64, BK: 256, KC: 32},
	{BM: 32, BN: 64, WM: 32, WN: 32, BK: 256, KC: 32},
	{BM: 32, BN: 64, WM: 32, WN: 32, BK: 128, KC: 32},
	{BM: 16, BN: 32, WM: 16, WN: 16, BK: 128, KC: 16},
}

// narrowCoopTiles come first for products of at most NarrowCoopCols
// columns (short prompts, many sequences decoding together): there the
// weights' decoding, the same for any width, is the cost, and 64-row tiles
// spread it over four times the workgroups of the 128-row ones. On the
// H200 the first took a 14336x4096 Q4_K product from 217 to 116 µs at 16
// to 64 columns, the second a 4096x14336 Q6_K one from 660 to 590 µs
// (docs/KERNELS.md, "Batches of sequences").
var narrowCoopTiles = []CoopTile{
	{BM: 64, BN: 64, WM: 32, WN: 32, BK: 64, KC: 64},
	{BM: 64, BN: 128, WM: 32, WN: 64, BK: 128, KC: 32},
}

// NarrowCoopCols is the most columns for which CoopTileForShape prefers
// narrowCoopTiles.
const NarrowCoopCols = 64

// CoopTiles are the cooperative-matrix tiles that BenchmarkMatMulCoop
// -sweep and infer tune try beyond the built-in one: wide tiles share each
// decoded weight among more columns, tall ones each staged activation
// among more rows, big subgroup parts each loaded fragment among more
// products.
var CoopTiles = []CoopTile{
	{BM: 128, BN: 128, WM: 64, WN: 32, BK: 64, KC: 64},
	{BM: 128, BN: 128, WM: 32, WN: 64, BK: 64, KC: 64},
	{BM: 128, BN: 128, WM: 64, WN: 64, BK: 64, KC: 64},
	{BM: 128, BN: 128, WM: 64, WN: 32, BK: 64, KC: 32},
	{BM: 128, BN: 256, WM: 64, WN: 64, BK: 64, KC: 32},
	{BM: 64, BN: 128, WM: 32, WN: 32, BK: 64, KC: 64},
	{BM: 128, BN: 64, WM: 32, WN: 32, BK: 64, KC: 64},
	{BM: 128, BN: 64, WM: 64, WN: 32, BK: 128, KC: 32},
	{BM: 64, BN: 128, WM: 32, WN: 64, BK: 128, KC: 32},
	{BM: 64, BN: 128, WM: 32, WN: 64, BK: 256, KC: 32},
	{BM: 64, BN: 64, WM: 32, WN: 32, BK: 64, KC: 64},
	{BM: 128, BN: 128, WM: 64, WN: 32, BK: 128, KC: 16},
}

// HasCoop says whether the cooperative-matrix product takes weights of
// type t: the quantized types and the 16-bit floats, which dequantize into
// f16 (BF16 keeps its 8-bit significand; values beyond f16's range would
// not survive, and no model we know stores such weights). F32 weights keep
// the scalar kernels and their exact values.
func HasCoop(t quant.Type) bool {
	switch t {
	case quant.Q4_K, quant.Q5_K, quant.Q6_K, quant.Q8_0, quant.Q4_0, quant.F16, quant.BF16:
		return true
	}
	return false
}

// UseCoop says whether a product of n activation columns of K values with
// weights of type t runs on the cooperative-matrix kernel: in prefill (the
// matrix-vector kernels keep decode), for rows of whole 16-byte words of
// f16.
func (k *Kernels) UseCoop(t quant.Type, n, K int) bool { return k.CoopTakes(n, K) && HasCoop(t) }

// CoopTakes says whether products of n activation columns of K values run
// on the cooperative-matrix kernel for every weight type it takes, which
// include all of HasQ8's: no product of such activations reads an 8-bit
// copy of them.
func (k *Kernels) CoopTakes(n, K int) bool {
	return k.coopOn() && !k.MatVecTakes(n) && K%8 == 0
}

func (k *Kernels) coopOn() bool { return k.CoopMat.On() || k.CoopEmulated }

// CoopTileFor is the tile for weights of type t on matrices big enough to
// fill the device: k.CoopTiled where it takes them, else the first built-in
// tile that does.
func (k *Kernels) CoopTileFor(t quant.Type) CoopTile { return k.coopTile(t, nil) }

// CoopTileForShape is the tile the engine uses for a rows x K matrix of
// type t and n activation columns: as CoopTileFor, except that without a
// tuned tile it passes over built-in tiles that would leave the matrix
// fewer workgroups than half the device's compute units (the k and v
// projections of 1024 rows, on 128-row tiles, would keep a quarter of an
// H200 busy) while a later one gives it enough; and that for at most
// NarrowCoopCols columns it tries narrowCoopTiles first.
func (k *Kernels) CoopTileForShape(t quant.Type, rows, n int) CoopTile {
	cus := k.info.ComputeUnits
	if cus == 0 {
		cus = 32
	}
	enough := func(tile CoopTile) bool { return 2*ceil(rows, tile.BM)*ceil(n, tile.BN) >= cus }
	if n <= NarrowCoopCols && !(k.CoopTiled.BM != 0 && k.CheckCoopTile(k.CoopTiled, t) == nil) {
		if tile, ok := k.pickCoopTile(narrowCoopTiles, t, enough); ok {
			return tile
		}
	}
	return k.coopTile(t, enough)
}

// coopTile is k.CoopTiled where it takes type t, else the first built-in
// tile that takes it and satisfies enough (nil: any), else the first that
// takes it.
func (k *Kernels) coopTile(t quant.Type, enough func(CoopTile) bool) CoopTile {
	if k.CoopTiled.BM != 0 && k.CheckCoopTile(k.CoopTiled, t) == nil {
		return k.CoopTiled
	}
	if tile, ok := k.pickCoopTile(defaultCoopTiles, t, enough); ok {
		return tile
	}
	if tile, ok := k.pickCoopTile(defaultCoopTiles, t, nil); ok {
		return tile
	}
	return defaultCoopTiles[len(defaultCoopTiles)-1]
}

// pickCoopTile is the first of tiles that takes type t on this device and
// satisfies enough (nil: any).
func (k *Kernels) pickCoopTile(tiles []CoopTile, t quant.Type, enough func(CoopTile) bool) (CoopTile, bool) {
	m, n, _ := k.coopShape()
	for _, tile := range tiles {
		// The emulation holds whole fragments per invocation: beyond 4 per
		// subgroup a driver may refuse to build it (NVIDIA's did).
		if k.CoopEmulated && (tile.WM/m)*(tile.WN/n) > 4 {
			continue
		}
		if k.CheckCoopTile(tile, t) == nil && (enough == nil || enough(tile)) {
			return tile, true
		}
	}
	return CoopTile{}, false
}

// coopShape is the fragment shape: the policy's (k.CoopMat.F16), else
// 16x16x16 (the emulation's default).
func (k *Kernels) coopShape() (m, n, kk int) {
	if s := k.CoopMat.F16; s.M != 0 {
		return s.M, s.N, s.K
	}
	return 16, 16, 16
}

// coopSubgroup is the subgroup size the kernel is built for: the one the
// policy requires, else the device's; 8 invocations per emulated subgroup.
func (k *Kernels) coopSubgroup() int {
	if k.CoopEmulated {
		return 8
	}
	if k.CoopMat.Subgroup != 0 {
		return k.CoopMat.Subgroup
	}
	return k.info.SubgroupSize
}

// F16Bytes is the size of n rows of K activations in the layout
// QuantizeF16 writes and MatMulCoop reads: n*K f16 values, then one f32
// scale per row.
func F16Bytes(n, K int) int64 { return 2*int64(n)*int64(K) + f32(n) }

// QuantizeF16 records the rounding of n rows of K f32 activations (K a
// multiple of 8) to f16 with a power-of-two scale per row
// (quantize_f16.comp), into dst.
func (k *Kernels) QuantizeF16(s *vk.Sequence, dst, x vk.Binding, n, K int) error {
	return k.quantizeF16(s, f16Copy, dst, x, nil, nil, n, K, 0, 0)
}

// F16BlockedBytes is the size of QuantizeF16Blocked's layout of cols
// columns of K activations: cols*K f16 values, then one f32 scale per
// column.
func F16BlockedBytes(cols, K int) int64 { return 2*int64(cols)*int64(K) + f32(cols) }

// QuantizeF16Blocked rounds n rows of K f32 activations as QuantizeF16
// does into the blocked layout matvec_coopmat reads: value k of row r at
// half ((k/16)·cols + r)·16 + k%16, then the scales of all cols rows. cols
// (at least n) is the rows the layout holds; those past n are never
// written. K is a multiple of 16.
func (k *Kernels) QuantizeF16Blocked(s *vk.Sequence, dst, x vk.Binding, n, K, cols int) error {
	return k.quantizeF16(s, f16Copy, dst, x, nil, nil, n, K, cols, 0)
}

// RMSNormF16 is RMSNorm (out = x / sqrt(mean(x^2) + eps) * w, row by
// row; out may be x) that also writes its result's f16 copy to dst, as
// QuantizeF16 (blocked 0) or QuantizeF16Blocked (blocked rows) would:
// the norm before the cooperative-matrix products, in one dispatch.
func (k *Kernels) RMSNormF16(s *vk.Sequence, dst, out, x, w vk.Binding, n, K, blocked int, eps float32) error {
	if err := need("rms_norm weights", w, f32(K)); err != nil {
		return err
	}
	return k.quantizeF16(s, f16Norm, dst, x, &w, &out, n, K, blocked, eps)
}

// GatedF16 is Gated (out = act(gate) * up, n rows of K) that also writes
// the result's f16 copy to dst, as RMSNormF16 does: the gated activation
// before the down projection on the matrix units, in one dispatch.
func (k *Kernels) GatedF16(s *vk.Sequence, g GLU, dst, out, gate, up vk.Binding, n, K, blocked int) error {
	if err := g.check(); err != nil {
		return err
	}
	if err := need("gated up", up, f32(n*K)); err != nil {
		return err
	}
	return k.quantizeF16(s, g.q8Op(), dst, gate, &up, &out, n, K, blocked, 0)
}

// Operations of quantize_f16.comp (its OP specialization constant): the
// plain rounding and the gated activations take quantize_q8's numbers
// (q8Copy, GLU.q8Op), so that one GLU method names both; the norm is its
// own.
const (
	f16Copy = q8Copy
	f16Norm = 3
)

// quantizeF16 records quantize_f16 with operation op (y and out nil for
// the plain rounding) into dst: row after row with blocked 0, else in
// blocks of 16 for blocked rows.
func (k *Kernels) quantizeF16(s *vk.Sequence, op uint32, dst, x vk.Binding, y, out *vk.Binding, n, K, blocked int, eps float32) error {
	if err := positive("quantize_f16", n, K); err != nil {
		return err
	}
	if blocked == 0 && K%8 != 0 {
		return fmt.Errorf("kernels: quantize_f16: rows of %d values: need a multiple of 8", K)
	}
	if blocked != 0 && K%16 != 0 {
		return fmt.Errorf("kernels: quantize_f16: blocked rows of %d values: need a multiple of 16", K)
	}
	if blocked != 0 && blocked < n {
		return fmt.Errorf("kernels: quantize_f16: a blocked layout of %d rows for %d: need at least the rows", blocked, n)
	}
	dstBytes := F16Bytes(n, K)
	if blocked != 0 {
		dstBytes = F16BlockedBytes(blocked, K)
	}
	if err := need("quantize_f16 x", x, f32(n*K)); err != nil {
		return err
	}
	if err := need("quantize_f16 dst", dst, dstBytes); err != nil {
		return err
	}
	bs := []vk.Binding{dst, x}
	if y != nil {
		if err := need("quantize_f16 out", *out, f32(n*K)); err != nil {
			return err
		}
		bs = append(bs, *y, *out)
	} else {
		in, err := k.unusedInput()
		if err != nil {
			return err
		}
		unused, err := k.unused()
		if err != nil {
			return err
		}
		bs = append(bs, in, unused)
	}
	if err := vec4Aligned("quantize_f16", bs...); err != nil {
		return err
	}
	p, err := k.pipeline(k.quantizeF16Spec(op, K))
	if err != nil {
		return err
	}
	gx, gy := k.grid(n)
	s.Dispatch(p, bs, vk.Push(uint32(n), uint32(K), uint32(blocked), eps), gx, gy, 1)
	return nil
}

// QuantizeF16Spec is the pipeline QuantizeF16 builds for rows of K values.
func (k *Kernels) QuantizeF16Spec(K int) vk.PipelineSpec { return k.quantizeF16Spec(f16Copy, K) }

// RMSNormF16Spec is the pipeline RMSNormF16 builds for rows of K values.
func (k *Kernels) RMSNormF16Spec(K int) vk.PipelineSpec { return k.quantizeF16Spec(f16Norm, K) }

// GatedF16Spec is the pipeline GatedF16 builds for g on rows of K values.
func (k *Kernels) GatedF16Spec(g GLU, K int) vk.PipelineSpec { return k.quantizeF16Spec(g.q8Op(), K) }

// quantizeF16Spec sizes the workgroup, one a row, as the norm's: a lane
// per 4 values up to 1024, so that the few rows of a batch of decoding
// sequences are not each walked by 64 lanes one load after another.
func (k *Kernels) quantizeF16Spec(op uint32, K int) vk.PipelineSpec {
	lanes := min(k.info.MaxWorkgroupInvocations, normLanes, max(Lanes, ceil(K, 4*Lanes)*Lanes))
	return spec("quantize_f16", 4, 16, 0, uint32(lanes), k.subgroups(lanes), op)
}

// MatMulCoop records dst = W·x on the matrix units for n columns of
// activations xh in QuantizeF16's layout, weights of a type where HasCoop
// holds, with an explicit tile: matmul_coopmat on the device's
// cooperative matrices (k.CoopMat), or matmul_coopmat_emu where
// k.CoopEmulated asks for the software emulation.
func (k *Kernels) MatMulCoop(s *vk.Sequence, dst, w, xh vk.Binding, t quant.Type, n, rows, K int, tile CoopTile) error {
	if err := k.coopReady("matmul_coopmat", t); err != nil {
		return err
	}
	if K%8 != 0 {
		return fmt.Errorf("kernels: matmul_coopmat: rows of %d values: need a multiple of 8", K)
	}
	rb, err := checkMatrix("matmul_coopmat", dst, w, xh, F16Bytes(n, K), t, n, rows, K)
	if err != nil {
		return err
	}
	if err := k.CheckCoopTile(tile, t); err != nil {
		return err
	}
	if err := coopAligned("matmul_coopmat", t, w, xh); err != nil {
		return err
	}
	return k.dispatchTiles(s, "matmul_coopmat", k.MatMulCoopSpec(t, tile), dst, w, xh, t, n, rows, K, rb, tile.BM, tile.BN)
}

// coopReady reports whether product name can run on the matrix units (the
// device's or the emulation) with weights of type t.
func (k *Kernels) coopReady(name string, t quant.Type) error {
	if !HasCoop(t) {
		return fmt.Errorf("kernels: %s: weights of type %s: %w", name, t, quant.ErrUnsupported)
	}
	if !k.coopOn() {
		return fmt.Errorf("kernels: %s: cooperative matrices are off on this device", name)
	}
	return nil
}

// coopAligned reports whether the f16 products can bind weights w and
// activations xh where they are: the shaders read the weights in 4-byte
// words and the activations in 16-byte ones.
func coopAligned(name string, t quant.Type, w, xh vk.Binding) error {
	if w.Off%4 != 0 || xh.Off%16 != 0 {
		return fmt.Errorf("kernels: %s: weights at offset %d, activations at %d: need multiples of 4 and 16", name, w.Off, xh.Off)
	}
	// dequant.glsl's DQ_WIDE loads a Q4_K or Q5_K block's header as one
	// 16-byte word.
	if (t == quant.Q4_K || t == quant.Q5_K) && w.Off%16 != 0 {
		return fmt.Errorf("kernels: %s: %s weights at offset %d: need a multiple of 16", name, t, w.Off)
	}
	return nil
}

// CheckCoopTile reports whether tile can run on this device with weights
// of type t and the fragment shape in use.
func (k *Kernels) CheckCoopTile(tile CoopTile, t quant.Type) error {
	m, n, kk := k.coopShape()
	bad := func(why string) error { return fmt.Errorf("kernels: matmul_coopmat: tile %v: %s", tile, why) }
	switch {
	case tile.BM < 1 || tile.BN < 1 || tile.WM < 1 || tile.WN < 1 || tile.BK < 1 || tile.KC < 1:
		return bad("sizes must be positive")
	case tile.BM%tile.WM != 0 || tile.BN%tile.WN != 0:
		return bad("subgroup parts must divide the tile")
	case tile.WM%m != 0 || tile.WN%n != 0:
		return bad(fmt.Sprintf("subgroup parts must be whole %dx%d fragments", m, n))
	case tile.BK%kSpan(t) != 0:
		return bad(fmt.Sprintf("K step must hold whole runs of %d %s values", kSpan(t), t))
	case tile.BK%tile.KC != 0 || tile.KC%kk != 0 || tile.KC%8 != 0:
		return bad(fmt.Sprintf("the activation chunk must divide the K step and be a multiple of %d and of 8", kk))
	}
	if inv := tile.Subgroups() * k.coopSubgroup(); inv > k.info.MaxWorkgroupInvocations {
		return bad(fmt.Sprintf("needs %d invocations, device allows %d", inv, k.info.MaxWorkgroupInvocations))
	}
	if b := tile.SharedBytes(m, n); b > k.info.SharedMemory {
		return bad(fmt.Sprintf("needs %d bytes of shared memory, device has %d", b, k.info.SharedMemory))
	}
	return nil
}

// kSpan is the run of values a K step of the f16 stage must hold whole:
// the values that consecutive pieces cover together. A Q4_K/Q5_K piece
// holds values of two 32-value halves of a 64-value run, and the stage cuts
// Q6_K alike (f16stage.glsl); the other blocks are plain (16 values for the
// float types).
func kSpan(t quant.Type) int {
	switch {
	case t == quant.Q4_K || t == quant.Q5_K || t == quant.Q6_K:
		return 64
	case isFloat(t):
		return 16
	}
	return t.BlockSize()
}

// MatMulCoopSpec is the pipeline MatMulCoop builds for weights of type t.
func (k *Kernels) MatMulCoopSpec(t quant.Type, tile CoopTile) vk.PipelineSpec {
	m, n, kk := k.coopShape()
	sg := k.coopSubgroup()
	name, wave := "matmul_coopmat", sg
	if k.CoopEmulated {
		name, wave = "matmul_coopmat_emu", 0
	}
	return spec(name, 3, 16, wave, uint32(tile.Subgroups()*sg), uint32(t),
		uint32(tile.BM), uint32(tile.BN), uint32(tile.WM), uint32(tile.WN), uint32(tile.BK), uint32(tile.KC),
		uint32(m), uint32(n), uint32(kk), uint32(sg))
}

// CoopDevice converts a device report into what the cooperative-matrix
// policy reads.
func CoopDevice(info vk.DeviceInfo) coopmat.Device {
	d := coopmat.Device{
		VendorID: info.VendorID, DeviceID: info.DeviceID, Name: info.Name, Driver: info.Driver,
		SubgroupSize: info.SubgroupSize, MinSubgroupSize: info.MinSubgroupSize, MaxSubgroupSize: info.MaxSubgroupSize,
		SizeControl: info.SizeControl, SharedMemory: info.SharedMemory, MixedDot: info.DotMixedAccelerated,
		Unusable: info.CoopMatrixOff,
	}
	if !info.CoopMatrix {
		return d
	}
	for _, s := range info.CoopMatShapes {
		d.Shapes = append(d.Shapes, coopmat.Fragment{M: s.M, N: s.N, K: s.K, A: s.A, B: s.B, C: s.C, Result: s.Result,
			Saturating: s.Saturating, Scope: s.Scope})
	}
	return d
}

// MaxCoopSplits is the most parts MatMulCoopSplit cuts K into.
const MaxCoopSplits = 32

// MatMulCoopSplit records matmul_coopmat with K cut into splits runs of
// whole tile steps, each run a workgroup of its own along z: part gets
// splits partial products of n x rows values, one after another, which
// SplitSum adds. A batch of a few columns has few tiles, each walking all
// of K; the splits give the device more of them.
func (k *Kernels) MatMulCoopSplit(s *vk.Sequence, part, w, xh vk.Binding, t quant.Type, n, rows, K int, tile CoopTile, splits int) error {
	if splits < 1 || splits > MaxCoopSplits {
		return fmt.Errorf("kernels: matmul_coopmat: %d splits of K (want 1 to %d)", splits, MaxCoopSplits)
	}
	if err := k.coopReady("matmul_coopmat", t); err != nil {
		return err
	}
	if K%8 != 0 {
		return fmt.Errorf("kernels: matmul_coopmat: rows of %d values: need a multiple of 8", K)
	}
	rb, err := checkMatrix("matmul_coopmat", vk.Binding{Buf: part.Buf, Off: part.Off, Size: part.Size / int64(splits)}, w, xh, F16Bytes(n, K), t, n, rows, K)
	if err != nil {
		return err
	}
	if err := need("matmul_coopmat partials", part, f32(splits*n*rows)); err != nil {
		return err
	}
	if err := k.CheckCoopTile(tile, t); err != nil {
		return err
	}
	if err := coopAligned("matmul_coopmat", t, w, xh); err != nil {
		return err
	}
	p, err := k.pipeline(k.MatMulCoopSplitSpec(t, tile, splits))
	if err != nil {
		return err
	}
	s.Label(fmt.Sprintf("%dx%d %s", rows, K, t))
	s.Dispatch(p, []vk.Binding{part, w, xh}, vk.Push(uint32(rows), uint32(n), uint32(K), uint32(rb)),
		uint32(ceil(rows, tile.BM)), uint32(ceil(n, tile.BN)), uint32(splits))
	return nil
}

// SplitSum records dst = the sum of the splits partials of n values in
// part (in order), plus r where it is not nil (dst may be r).
func (k *Kernels) SplitSum(s *vk.Sequence, dst, part vk.Binding, r *vk.Binding, n, splits int) error {
	if err := positive("split_sum", n, splits); err != nil {
		return err
	}
	if err := need("split_sum dst", dst, f32(n)); err != nil {
		return err
	}
	if err := need("split_sum partials", part, f32(splits*n)); err != nil {
		return err
	}
	res, err := k.unusedInput()
	if r != nil {
		if err = need("split_sum residual", *r, f32(n)); err != nil {
			return err
		}
		res = *r
	} else if err != nil {
		return err
	}
	p, err := k.pipeline(k.SplitSumSpec(r != nil))
	if err != nil {
		return err
	}
	gx, gy := k.grid(ceil(n, 256))
	s.Dispatch(p, []vk.Binding{dst, part, res}, vk.Push(uint32(n), uint32(splits)), gx, gy, 1)
	return nil
}

// MatMulCoopSplitSpec is the pipeline of MatMulCoopSplit.
// It is matmul_coopmat_split, the build with KSPLIT as a constant
// (id 12), so that prefill's pipelines stay those of matmul_coopmat.
func (k *Kernels) MatMulCoopSplitSpec(t quant.Type, tile CoopTile, splits int) vk.PipelineSpec {
	ps := k.MatMulCoopSpec(t, tile)
	ps.Name += "_split"
	if k.CoopEmulated {
		ps.Name = "matmul_coopmat_split_emu"
	}
	ps.SPIRV = shaders.SPIRV(ps.Name)
	ps.Spec = append(ps.Spec, uint32(splits))
	return ps
}

// SplitSumSpec is the pipeline of SplitSum, with the residual or not.
func (k *Kernels) SplitSumSpec(residual bool) vk.PipelineSpec {
	return spec("split_sum", 3, 8, 0, b32(residual))
}

// CoopSplitFor is the tile of a product of n columns on matmul_coopmat
// (CoopTileForShape) and the parts to cut K into: for a narrow batch (at
// most NarrowCoopCols columns) whose tiles number fewer than 1.5 per
// compute unit, the fewest powers of two that reach it, up to 16 and at
// least two steps a part; else 1. Narrow batches on few rows have few
// tiles: 4096×14336 Q4_K at 64 columns took 501 µs on the H200 in 64
// tiles, 112 µs in 4 parts each (docs/KERNELS.md). Prefill's partial
// products would be large: its k and v projections in parts cost pp512
// 2 % there.
//
// The parts give the workgroups, so the tile is the first narrow one that
// takes t (64 rows) rather than CoopTileForShape's, which looks for enough
// workgroups in smaller tiles of longer steps (32x64, steps of 256: 250 µs
// in 2 parts where 64x64 in 4 took 109, 4096×14336 Q4_K at 32 columns).
// A tuned tile (CoopTiled) is kept.
func (k *Kernels) CoopSplitFor(t quant.Type, n, rows, K int) (CoopTile, int) {
	tile := k.CoopTileForShape(t, rows, n)
	if n > NarrowCoopCols {
		return tile, 1
	}
	if !(k.CoopTiled.BM != 0 && k.CheckCoopTile(k.CoopTiled, t) == nil) {
		if nt, ok := k.pickCoopTile(narrowCoopTiles, t, nil); ok {
			tile = nt
		}
	}
	cus := k.info.ComputeUnits
	if cus == 0 {
		cus = 32
	}
	tiles, splits := ceil(rows, tile.BM)*ceil(n, tile.BN), 1
	for 2*tiles*splits < 3*cus && splits < 16 && K >= 2*tile.BK*2*splits {
		splits *= 2
	}
	return tile, splits
}
