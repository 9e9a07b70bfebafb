package tune

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/vkinfer/vkinfer/quant"
	"github.com/vkinfer/vkinfer/vk"
	"github.com/vkinfer/vkinfer/vk/kernels"
)

// recordFunc records one matrix product dst[n][rows] = x[n][K] . W^T; x
// holds the activations in the layout the kernel reads (f32, q8 for the
// _q8 kernels, f16 for matmul_coopmat: activationsOf).
type recordFunc func(k *kernels.Kernels, s *vk.Sequence, dst, w, x vk.Binding, t quant.Type, n, rows, K int) error

// matVariant is one geometry of a matrix kernel.
type matVariant struct {
	name     string
	ref, def bool
	f16      bool // rounds dequantized weights to f16 (a looser parity bound)
	x16      bool // rounds activations to f16 (likewise)
	rec      recordFunc
	// on names what the variant runs as on a matrix, for variants whose
	// geometry the matrix decides (matvec_q8's lanes 0); nil for the rest.
	on func(mat Matrix) string
	// takes, where set, says whether the variant takes a matrix; where it
	// does not, the cell is not run and marked Fallback: the engine runs
	// the built-in default there instead (matmul_coopmat's tiles, whose K
	// step must hold whole runs of the weight type's pieces).
	takes func(mat Matrix) error
	// f16All says that every weight type reaches the products as f16
	// (matmul_coopmat dequantizes into f16 fragments), where f16 rounds
	// only the quantized types: see weightsF16.
	f16All bool
}

// weightsF16 reports whether v's weights of type t reach the products
// rounded to f16, which widens the parity bound (dotBound). f16 tiles of
// the f32 kernel round the dequantized values of quantized types (float
// types they keep). matmul_coopmat rounds every type into f16 but F16
// itself, which is exact: a quantized value (a scale times a small
// integer, less a min) has more significant bits than f16 holds; BF16
// converts exactly while within f16's normal range, but its wider
// exponent range is not (magnitudes below 2^-14 lose bits as f16
// subnormals, beyond 65504 overflow), so it takes the f16 allowance too.
func (v matVariant) weightsF16(t quant.Type) bool {
	if v.f16All {
		return t != quant.F16
	}
	return v.f16 && t.BlockSize() > 1
}

// activations is the layout a matrix kernel reads its activations in.
type activations int

const (
	actF32 activations = iota
	actQ8              // kernels.QuantizeQ8's: the _q8 kernels
	actF16             // kernels.QuantizeF16's: matmul_coopmat
)

// activationsOf is the layout kernel reads.
func activationsOf(kernel string) activations {
	switch {
	case takesQ8(kernel):
		return actQ8
	case kernel == KernelMatMulCoop:
		return actF16
	}
	return actF32
}

// The tiles the prefill sweep tries: the square 16x16 reference, the
// anisotropic and non-power-of-two workgroups the literature compares it
// with (one output per invocation), then per-invocation micro-tiles, each
// also with f16 weights in shared memory, then wide tiles. BM runs along
// the weight rows, which are the output's contiguous axis.
var (
	plainTiles = []kernels.Tile{
		{BM: 16, BN: 16, TM: 1, TN: 1}, {BM: 8, BN: 8, TM: 1, TN: 1}, {BM: 8, BN: 16, TM: 1, TN: 1},
		{BM: 16, BN: 8, TM: 1, TN: 1}, {BM: 8, BN: 32, TM: 1, TN: 1}, {BM: 32, BN: 8, TM: 1, TN: 1},
		{BM: 13, BN: 13, TM: 1, TN: 1}, {BM: 21, BN: 21, TM: 1, TN: 1},
	}
	microTiles = []kernels.Tile{
		{BM: 32, BN: 32, TM: 2, TN: 2}, {BM: 32, BN: 32, TM: 4, TN: 4}, {BM: 64, BN: 64, TM: 4, TN: 4},
		{BM: 64, BN: 32, TM: 4, TN: 2}, {BM: 32, BN: 64, TM: 2, TN: 4}, {BM: 16, BN: 64, TM: 2, TN: 8},
		{BM: 64, BN: 16, TM: 8, TN: 2}, {BM: 128, BN: 64, TM: 8, TN: 4}, {BM: 64, BN: 128, TM: 4, TN: 8},
	}
	quickTiles = []kernels.Tile{
		{BM: 16, BN: 16, TM: 1, TN: 1}, {BM: 8, BN: 32, TM: 1, TN: 1}, {BM: 32, BN: 8, TM: 1, TN: 1},
		{BM: 13, BN: 13, TM: 1, TN: 1}, {BM: 32, BN: 32, TM: 4, TN: 4, F16: true},
	}
)

// The tiles the matmul_q8 sweep tries besides the built-in k.TileQ8: the
// wide ones that won the H200's kernel benchmark (kernels.defaultQ8Tiles)
// and the next ones down (kernels.Q8Tiles); the quick sweep's are small.
var (
	q8Tiles = []kernels.Tile{
		{BM: 32, BN: 256, TM: 4, TN: 8}, {BM: 64, BN: 128, TM: 4, TN: 8}, {BM: 64, BN: 128, TM: 8, TN: 4},
		{BM: 32, BN: 128, TM: 4, TN: 8}, {BM: 64, BN: 64, TM: 4, TN: 4},
	}
	quickQ8Tiles = []kernels.Tile{
		{BM: 32, BN: 32, TM: 4, TN: 4}, {BM: 32, BN: 64, TM: 4, TN: 8}, {BM: 16, BN: 64, TM: 2, TN: 8},
	}
)

// refTile is what "vs ref" compares prefill tiles with.
var refTile = kernels.Tile{BM: 16, BN: 16, TM: 1, TN: 1}

func defaultTiles(quick bool) []kernels.Tile {
	if quick {
		return quickTiles
	}
	out := append([]kernels.Tile(nil), plainTiles...)
	for _, t := range microTiles {
		f := t
		f.F16 = true
		out = append(out, t, f)
	}
	return append(out, kernels.WideTiles...)
}

// defaultQ8Tiles are the matmul_q8 tiles to try on a device: those that fit
// it for every weight type, so that the table holds no variant that could
// never be chosen.
func defaultQ8Tiles(info vk.DeviceInfo, quick bool) []kernels.Tile {
	tiles := q8Tiles
	if quick {
		tiles = quickQ8Tiles
	}
	return slices.DeleteFunc(slices.Clone(tiles), func(t kernels.Tile) bool { return checkQ8Tile(t, info) != nil })
}

func defaultMatVecs(info vk.DeviceInfo, quick bool) []kernels.MatVecShape {
	lanes, rows, unrolls := []int{32, 64, 128, 256}, []int{1, 2, 4, 8}, []int{1, 2}
	waves := []int{0}
	// A required wave only differs from the driver's choice where the
	// device offers several.
	if info.SizeControl && info.MinSubgroupSize < info.MaxSubgroupSize {
		for _, w := range []int{16, 32, 64, 128} {
			if w >= info.MinSubgroupSize && w <= info.MaxSubgroupSize {
				waves = append(waves, w)
			}
		}
	}
	if quick {
		lanes, rows, unrolls, waves = []int{32, 64}, []int{1, 2}, []int{2}, []int{0}
	}
	return matVecGrid(lanes, rows, unrolls, waves)
}

// defaultMatVecsQ8 are the matvec_q8 shapes to try: lanes 0 (sized per
// matrix, as the built-in default) or fixed, over rows and unroll. The
// driver's own wave only: the kernel reduces across subgroups of any size.
func defaultMatVecsQ8(quick bool) []kernels.MatVecShape {
	if quick {
		return matVecGrid([]int{0, 32, 64}, []int{1, 2}, []int{1}, []int{0})
	}
	return matVecGrid([]int{0, 32, 64, 128}, []int{1, 2, 4, 8}, []int{1, 2}, []int{0})
}

// matVecGrid is every shape of the given lanes, rows, unroll and waves
// (a wave that does not divide the lanes is left out).
func matVecGrid(lanes, rows, unrolls, waves []int) []kernels.MatVecShape {
	var out []kernels.MatVecShape
	for _, l := range lanes {
		for _, r := range rows {
			for _, u := range unrolls {
				for _, w := range waves {
					if w == 0 || l%w == 0 {
						out = append(out, kernels.MatVecShape{Lanes: l, Rows: r, Unroll: u, Wave: w})
					}
				}
			}
		}
	}
	return out
}

// withDefault is list with def added at its end where list lacks it: the
// built-in default is always measured. list itself is never written.
func withDefault[T comparable](list []T, def T) []T {
	if slices.Contains(list, def) {
		return list
	}
	return append(slices.Clip(list), def)
}

// columns is the number of activation columns of the prefill sweeps.
func (sw *sweeper) columns() int {
	switch {
	case sw.o.Columns != 0:
		return sw.o.Columns
	case sw.o.Quick:
		return 32
	}
	return 512
}

// matmul sweeps the prefill tile of the f32 kernel over every matrix of m.
func (sw *sweeper) matmul(m Model, r *Report, p *Profile) error {
	t, ok, err := sweepGeometry(sw, m, r, KernelMatMul, sw.columns(), orDefault(sw.o.Tiles, defaultTiles(sw.o.Quick)),
		func(k *kernels.Kernels) kernels.Tile { return k.Tile },
		func(k *kernels.Kernels, t, def kernels.Tile) matVariant {
			return matVariant{name: t.String(), ref: t == refTile, def: t == def, f16: t.F16, x16: t.X16,
				rec: func(k *kernels.Kernels, s *vk.Sequence, dst, w, x vk.Binding, qt quant.Type, n, rows, K int) error {
					return k.MatMulTiled(s, dst, w, x, qt, n, rows, K, t)
				}}
		})
	if ok {
		p.MatMul = &MatMul{BM: t.BM, BN: t.BN, TM: t.TM, TN: t.TN, F16: t.F16, X16: t.X16, KB: t.KB}
	}
	return err
}

// matmulQ8 sweeps the prefill tile of the 8-bit-activation kernel over the
// matrices of m it takes. The built-in tile is the reference: the f32
// kernel's 16x16 has no counterpart here.
func (sw *sweeper) matmulQ8(m Model, r *Report, p *Profile) error {
	t, ok, err := sweepGeometry(sw, m, r, KernelMatMulQ8, sw.columns(), orDefault(sw.o.TilesQ8, defaultQ8Tiles(sw.dev.Info(), sw.o.Quick)),
		func(k *kernels.Kernels) kernels.Tile { return k.TileQ8 },
		func(k *kernels.Kernels, t, def kernels.Tile) matVariant {
			return matVariant{name: matMulQ8Of(t).String(), ref: t == def, def: t == def,
				rec: func(k *kernels.Kernels, s *vk.Sequence, dst, w, xq vk.Binding, qt quant.Type, n, rows, K int) error {
					return k.MatMulQ8(s, dst, w, xq, qt, n, rows, K, t)
				}}
		})
	if ok {
		q := matMulQ8Of(t)
		p.MatMulQ8 = &q
	}
	return err
}

// matvec sweeps the decode matrix-vector shape of the f32 kernel over
// every matrix of m. The decode kernel has no standard reference shape:
// the built-in default is the one to beat.
func (sw *sweeper) matvec(m Model, r *Report, p *Profile) error {
	sh, ok, err := sweepGeometry(sw, m, r, KernelMatVec, 1, orDefault(sw.o.MatVecs, defaultMatVecs(sw.dev.Info(), sw.o.Quick)),
		func(k *kernels.Kernels) kernels.MatVecShape { return k.MatVec },
		func(k *kernels.Kernels, sh, def kernels.MatVecShape) matVariant {
			return matVariant{name: sh.String(), ref: sh == def, def: sh == def,
				rec: func(k *kernels.Kernels, s *vk.Sequence, dst, w, x vk.Binding, qt quant.Type, n, rows, K int) error {
					return k.MatVecWith(s, dst, w, x, qt, n, rows, K, sh)
				}}
		})
	if ok {
		p.MatVec = &MatVec{Lanes: sh.Lanes, Rows: sh.Rows, Unroll: sh.Unroll, Wave: sh.Wave}
	}
	return err
}

// matvecQ8 sweeps the decode shape of the 8-bit-activation kernel over the
// matrices of m it takes. Each shape runs as the engine runs it, through
// SizeMatVecQ8, so lanes 0 (the built-in default and the reference) takes
// the lanes the engine would give each matrix; its cells name them.
func (sw *sweeper) matvecQ8(m Model, r *Report, p *Profile) error {
	sh, ok, err := sweepGeometry(sw, m, r, KernelMatVecQ8, 1, orDefault(sw.o.MatVecsQ8, defaultMatVecsQ8(sw.o.Quick)),
		func(k *kernels.Kernels) kernels.MatVecShape { return k.MatVecQ8 },
		func(k *kernels.Kernels, sh, def kernels.MatVecShape) matVariant {
			v := matVariant{name: sh.String(), ref: sh == def, def: sh == def,
				rec: func(k *kernels.Kernels, s *vk.Sequence, dst, w, xq vk.Binding, qt quant.Type, n, rows, K int) error {
					return k.MatVecQ8With(s, dst, w, xq, nil, qt, n, rows, K, k.SizeMatVecQ8(sh, rows, K))
				}}
			if sh.Lanes == 0 {
				v.on = func(mat Matrix) string { return k.SizeMatVecQ8(sh, mat.Rows, mat.K).String() }
			}
			return v
		})
	if ok {
		p.MatVecQ8 = &MatVec{Lanes: sh.Lanes, Rows: sh.Rows, Unroll: sh.Unroll, Wave: sh.Wave}
	}
	return err
}

// orDefault is list, or def when the options gave none.
func orDefault[T any](list, def []T) []T {
	if list == nil {
		return def
	}
	return list
}

// sweepGeometry runs one matrix kernel's geometries gs, plus the built-in
// one (builtin) where gs lacks it, on the matrices of m with n activation
// columns, and returns the winner; ok is false when none won (see
// sweepMatrices). variant makes a geometry's table entry; def is the
// built-in geometry.
func sweepGeometry[G comparable](sw *sweeper, m Model, r *Report, kernel string, n int, gs []G,
	builtin func(*kernels.Kernels) G, variant func(k *kernels.Kernels, g, def G) matVariant) (g G, ok bool, err error) {
	k := sw.newKernels()
	defer k.Close()
	def := builtin(k)
	gs = withDefault(gs, def)
	vs := make([]matVariant, len(gs))
	for i, g := range gs {
		vs[i] = variant(k, g, def)
	}
	i, err := sw.sweepMatrices(k, m, r, kernel, n, vs)
	if i < 0 {
		return g, false, err
	}
	return gs[i], true, err
}

// sweepMatrices runs the variants vs of kernel, and the ones tests plant
// for it, on the matrices of m with n activation columns, adds the tables
// to r and returns the index in vs of the variant with the least weighted
// time among those that passed on every matrix. It returns -1 when none
// did, listing the kernel in r.Unchosen, and when the kernel took none of
// m's matrices (the notes say why).
func (sw *sweeper) sweepMatrices(k *kernels.Kernels, m Model, r *Report, kernel string, n int, vs []matVariant) (int, error) {
	tables, err := sw.matrices(k, m, kernel, n, slices.Concat(vs, sw.o.extra[kernel]))
	if err != nil {
		return -1, err
	}
	r.Tables = append(r.Tables, tables...)
	if len(tables) == 0 {
		return -1, nil
	}
	if i := choose(tables); i >= 0 && i < len(vs) {
		return i, nil
	}
	r.Unchosen = append(r.Unchosen, kernel)
	return -1, nil
}

// seedRows is how many distinct random rows a test matrix repeats: the
// values don't matter for speed, and a prime count keeps the repetition
// from lining up with any tile, so a kernel that mixes up rows is caught.
const seedRows = 67

// matrixCase is one weight shape on the device with its CPU reference.
type matrixCase struct {
	mat     Matrix
	n       int
	x, dst  *vk.Buffer   // x in the layout the kernels read: f32, q8 or f16
	copies  []*vk.Buffer // more copies of w, read in turn (decode: defeats the cache)
	cols    []int        // the activation columns parity checks
	want    [][]float64  // [len(cols)][seedRows]
	scale   [][]float64  // sum |w*x| of each, the magnitude errors are measured against
	rowSize int
}

func (c *matrixCase) free() {
	for _, b := range append([]*vk.Buffer{c.x, c.dst}, c.copies...) {
		if b != nil {
			b.Free()
		}
	}
}

// newMatrixCase uploads a rows x K matrix of seedRows repeated random rows
// (quantized with quant.Quantize), n random activation columns (rounded on
// the device to the q8 or f16 layout where act asks), and copies of the
// matrix filling minBytes; and computes the reference products of the
// checked columns in float64 from the dequantized rows and the activations
// as the kernels read them.
func (sw *sweeper) newMatrixCase(k *kernels.Kernels, mat Matrix, n int, minBytes int64, act activations) (c *matrixCase, err error) {
	rng := rand.New(rand.NewPCG(uint64(mat.Rows), uint64(mat.K)))
	rb, err := mat.Type.RowBytes(mat.K)
	if err != nil {
		return nil, err
	}
	seed, err := quant.Quantize(mat.Type, weights(rng, seedRows*mat.K))
	if err != nil {
		return nil, err
	}
	deq := make([]float32, seedRows*mat.K)
	if err := quant.Dequantize(mat.Type, seed, deq); err != nil {
		return nil, err
	}
	c = &matrixCase{mat: mat, n: n, rowSize: rb}
	// c as it is now: an error return sets the result c to nil before
	// deferred calls run.
	defer func(c *matrixCase) {
		if err != nil {
			c.free()
		}
	}(c)
	size := (int64(mat.Rows)*int64(rb) + 3) &^ 3
	raw := make([]byte, size)
	for off := 0; off < len(raw); off += len(seed) {
		copy(raw[off:], seed)
	}
	copies := max(1, int((minBytes+size-1)/size))
	s := sw.dev.NewSequence()
	defer s.Free()
	for i := range copies {
		b, err := sw.dev.NewBuffer(size, false)
		if err != nil {
			return nil, err
		}
		c.copies = append(c.copies, b)
		if i == 0 {
			err = b.Write(0, raw)
		} else {
			s.Copy(vk.Binding{Buf: b}, vk.Binding{Buf: c.copies[0]})
		}
		if err != nil {
			return nil, err
		}
	}
	if err := s.End(); err != nil {
		return nil, err
	}
	if err := s.Run(); err != nil {
		return nil, err
	}

	x := make([]float32, n*mat.K)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	if c.x, err = sw.dev.NewBuffer(4*int64(len(x)), false); err != nil {
		return nil, err
	}
	if err := c.x.WriteF32(0, x); err != nil {
		return nil, err
	}
	switch act {
	case actQ8:
		x, err = c.toQ8(sw.dev, k)
	case actF16:
		x, err = c.toF16(sw.dev, k)
	}
	if err != nil {
		return nil, err
	}
	if c.dst, err = sw.dev.NewBuffer(4*int64(n)*int64(mat.Rows), false); err != nil {
		return nil, err
	}
	c.cols = checkedColumns(n)
	for _, j := range c.cols {
		want, scale := make([]float64, seedRows), make([]float64, seedRows)
		for s := range seedRows {
			for k := range mat.K {
				v := float64(deq[s*mat.K+k]) * float64(x[j*mat.K+k])
				want[s] += v
				scale[s] += math.Abs(v)
			}
		}
		c.want, c.scale = append(c.want, want), append(c.scale, scale)
	}
	return c, nil
}

// toQ8 rounds the case's activations to the q8 layout on the device, as
// the engine does before a q8 product (kernels.QuantizeQ8), makes that the
// input the kernels read, and returns the rounded values q*d. The q8
// kernels' reference is the exact product with those, so that their
// parity bound stays the f32 rounding of a dot product (dotBound): the
// rounding itself is kernels.TestQuantizeQ8's to check.
func (c *matrixCase) toQ8(d *vk.Device, k *kernels.Kernels) ([]float32, error) {
	n, K := c.n, c.mat.K
	raw, err := c.round(d, kernels.Q8Bytes(n, K), func(s *vk.Sequence, dst, x vk.Binding) error {
		return k.QuantizeQ8(s, dst, x, n, K)
	})
	if err != nil {
		return nil, err
	}
	return kernels.DecodeQ8(raw, n, K)
}

// toF16 is toQ8 for matmul_coopmat: it rounds the activations to f16 rows
// with a power-of-two scale each (kernels.QuantizeF16) and returns the
// rounded values, f16 times the row's scale, which the reference then
// multiplies exactly. Like q8's, the rounding is the engine's and not the
// tile's (kernels.TestQuantizeF16 checks it), so the bound needs no
// allowance for f16 activations: only the weights' f16 rounding widens it
// (matVariant.weightsF16).
func (c *matrixCase) toF16(d *vk.Device, k *kernels.Kernels) ([]float32, error) {
	n, K := c.n, c.mat.K
	raw, err := c.round(d, kernels.F16Bytes(n, K), func(s *vk.Sequence, dst, x vk.Binding) error {
		return k.QuantizeF16(s, dst, x, n, K)
	})
	if err != nil {
		return nil, err
	}
	x := make([]float32, n*K)
	if err := quant.Dequantize(quant.F16, raw[:2*n*K], x); err != nil {
		return nil, err
	}
	for j := range n {
		scale := math.Float32frombits(binary.LittleEndian.Uint32(raw[2*n*K+4*j:]))
		for i := range K {
			x[j*K+i] *= scale // a power of two: exact
		}
	}
	return x, nil
}

// round runs rec, which rounds the case's f32 activations into a buffer
// of size bytes, makes that buffer the input the kernels read, and returns
// its contents.
func (c *matrixCase) round(d *vk.Device, size int64, rec func(s *vk.Sequence, dst, x vk.Binding) error) ([]byte, error) {
	xr, err := d.NewBuffer(size, false)
	if err != nil {
		return nil, err
	}
	s := d.NewSequence()
	defer s.Free()
	raw := make([]byte, xr.Size())
	err = rec(s, vk.Binding{Buf: xr}, vk.Binding{Buf: c.x})
	if err == nil {
		err = s.End()
	}
	if err == nil {
		err = s.Run()
	}
	if err == nil {
		err = xr.Read(0, raw)
	}
	if err != nil {
		xr.Free()
		return nil, fmt.Errorf("quantizing the activations: %w", err)
	}
	c.x.Free()
	c.x = xr
	return raw, nil
}

// checkedColumns are the activation columns parity reads: all of a small
// batch; of a large one the edges (the first and last tiles) and the
// middle, which is enough to catch a tile that misplaces its output.
func checkedColumns(n int) []int {
	if n <= 8 {
		cols := make([]int, n)
		for i := range cols {
			cols[i] = i
		}
		return cols
	}
	return []int{0, 1, n / 2, n - 2, n - 1}
}

// poison fills dst with NaN.
func (c *matrixCase) poison() error {
	nan := binary.LittleEndian.AppendUint32(nil, math.Float32bits(float32(math.NaN())))
	b := make([]byte, c.dst.Size())
	for i := 0; i < len(b); i += 4 {
		copy(b[i:], nan)
	}
	return c.dst.Write(0, b)
}

// check returns the largest error of the checked columns, every row, as a
// fraction of the dot product's magnitude sum |w*x|.
func (c *matrixCase) check() (float64, error) {
	worst := 0.0
	got := make([]float32, c.mat.Rows)
	for ci, j := range c.cols {
		if err := c.dst.ReadF32(4*int64(j)*int64(c.mat.Rows), got); err != nil {
			return 0, err
		}
		for r, g := range got {
			want, scale := c.want[ci][r%seedRows], c.scale[ci][r%seedRows]
			e := math.Abs(float64(g) - want)
			if scale > 0 {
				e /= scale
			}
			if math.IsNaN(e) {
				return math.Inf(1), nil
			}
			worst = max(worst, e)
		}
	}
	return worst, nil
}

// dotBound is the parity bound of a K-term f32 dot product: rounding
// errors grow like sqrt(K) ulps (8x margin), as the kernel tests allow. A
// tile that keeps weights in f16 adds up to 2^-10 of the magnitude (one
// f16 rounding of each weight, with room for drivers that truncate), and
// one that stages activations in f16 (x16) as much again: a product of
// two rounded factors errs by at most the sum of their relative errors
// (plus their product, 2^-20, inside the margin). Activations beyond f16
// range would overflow to infinities and fail parity outright; the sweep's
// are N(0, 1).
func dotBound(K int, f16, x16 bool) float64 {
	b := 8 * math.Sqrt(float64(K)) / (1 << 24)
	if f16 {
		b += 1.0 / 1024
	}
	if x16 {
		b += 1.0 / 1024
	}
	return b
}

// matrices runs every variant on every matrix of m with n activation
// columns and returns one table per matrix.
func (sw *sweeper) matrices(k *kernels.Kernels, m Model, kernel string, n int, vs []matVariant) ([]Table, error) {
	var tables []Table
	act := activationsOf(kernel)
	for _, mat := range m.Matrices {
		if act == actQ8 && !kernels.HasQ8(mat.Type) || act == actF16 && !kernels.HasCoop(mat.Type) {
			// The engine multiplies these with f32 activations anyway.
			sw.note("%s: %v %v left out: the kernel takes no %s weights", kernel, mat, mat.Names, mat.Type)
			continue
		}
		if act == actF16 && mat.K%8 != 0 {
			// Likewise (kernels.UseCoop).
			sw.note("%s: %v %v left out: the kernel takes rows of a multiple of 8 values", kernel, mat, mat.Names)
			continue
		}
		// Decode reads each weight once per token: to measure memory and
		// not a cache, a run reads copies of the matrix totalling 256 MiB
		// or more (an H100's L2 is 50 MiB). Prefill is compute bound. A
		// CPU driver (lavapipe) is measured as is: the copies would only
		// multiply its run time.
		var minBytes int64
		if decodes(kernel) && !sw.o.Quick && sw.dev.Info().Type != "cpu" {
			minBytes = 256 << 20
		}
		c, err := sw.newMatrixCase(k, mat, n, minBytes, act)
		if err != nil {
			return nil, fmt.Errorf("tune: %s %v: %w", kernel, mat, err)
		}
		t := Table{Kernel: kernel, Shape: fmt.Sprintf("%v %v, %d column(s)", mat, mat.Names, n), Unit: "GFLOPS", Weight: mat.Count}
		work := 2 * float64(n) * float64(mat.Rows) * float64(mat.K)
		if decodes(kernel) {
			t.Unit, work = "GB/s", float64(mat.Rows)*float64(c.rowSize)
		}
		for _, v := range vs {
			cell := Cell{Variant: v.name, Ref: v.ref, Default: v.def, Bound: dotBound(mat.K, v.weightsF16(mat.Type), v.x16)}
			if v.on != nil {
				cell.Variant += " (" + v.on(mat) + ")"
			}
			if v.takes != nil {
				if err := v.takes(mat); err != nil {
					cell.Status, cell.Fallback = err.Error(), true
					sw.logCell(kernel, mat.String(), cell)
					t.Cells = append(t.Cells, cell)
					continue
				}
			}
			err := sw.run(&cell, len(c.copies), c.poison, func(s *vk.Sequence) error {
				for _, w := range c.copies {
					if err := v.rec(k, s, vk.Binding{Buf: c.dst}, vk.Binding{Buf: w}, vk.Binding{Buf: c.x}, mat.Type, n, mat.Rows, mat.K); err != nil {
						return err
					}
					s.Barrier()
				}
				return nil
			}, c.check)
			if err != nil {
				c.free()
				return nil, fmt.Errorf("tune: %s %v %s: %w", kernel, mat, v.name, err)
			}
			sw.logCell(kernel, mat.String(), cell)
			t.Cells = append(t.Cells, cell)
		}
		c.free()
		t.finish(work)
		tables = append(tables, t)
	}
	return tables, nil
}

// weights returns n random values shaped like trained weights are for the
// quantizers: each 16-value run has its own spread and offset, so block
// scales, sub-block scales and mins all vary.
func weights(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := 0; i < n; i += 16 {
		sigma := math.Exp2(float64(r.IntN(9) - 6))
		mu := (r.Float64() - 0.5) * sigma
		for j := i; j < min(i+16, n); j++ {
			v[j] = float32(mu + r.NormFloat64()*sigma)
		}
	}
	return v
}
