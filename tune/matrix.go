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

// recordFunc records one matrix product dst[n][rows] = x[n][K] . W^T.
type recordFunc func(k *kernels.Kernels, s *vk.Sequence, dst, w, x vk.Binding, t quant.Type, n, rows, K int) error

// matVariant is one geometry of the matmul or matvec kernel.
type matVariant struct {
	name     string
	ref, def bool
	f16      bool // rounds dequantized weights to f16 (a looser parity bound)
	x16      bool // rounds activations to f16 (likewise)
	rec      recordFunc
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

// matmul sweeps the prefill tile over every matrix of m.
func (sw *sweeper) matmul(m Model, r *Report, p *Profile) error {
	k, err := kernels.New(sw.dev)
	if err != nil {
		return err
	}
	defer k.Close()
	tiles := sw.o.Tiles
	if tiles == nil {
		tiles = defaultTiles(sw.o.Quick)
	}
	if !slices.Contains(tiles, k.Tile) {
		tiles = append(tiles, k.Tile)
	}
	var vs []matVariant
	for _, t := range tiles {
		vs = append(vs, matVariant{name: t.String(), ref: t == refTile, def: t == k.Tile, f16: t.F16, x16: t.X16,
			rec: func(k *kernels.Kernels, s *vk.Sequence, dst, w, x vk.Binding, qt quant.Type, n, rows, K int) error {
				return k.MatMulTiled(s, dst, w, x, qt, n, rows, K, t)
			}})
	}
	vs = append(vs, sw.o.extraMatMul...)
	n := sw.o.Columns
	if n == 0 {
		n = 512
		if sw.o.Quick {
			n = 32
		}
	}
	tables, err := sw.matrices(k, m, KernelMatMul, n, vs)
	if err != nil {
		return err
	}
	r.Tables = append(r.Tables, tables...)
	if i := choose(tables); i >= 0 && i < len(tiles) {
		t := tiles[i]
		p.MatMul = &MatMul{BM: t.BM, BN: t.BN, TM: t.TM, TN: t.TN, F16: t.F16, X16: t.X16, KB: t.KB}
	} else {
		r.Unchosen = append(r.Unchosen, KernelMatMul)
	}
	return nil
}

// matvec sweeps the decode matrix-vector shape over every matrix of m.
func (sw *sweeper) matvec(m Model, r *Report, p *Profile) error {
	k, err := kernels.New(sw.dev)
	if err != nil {
		return err
	}
	defer k.Close()
	shapes := sw.o.MatVecs
	if shapes == nil {
		shapes = defaultMatVecs(sw.dev.Info(), sw.o.Quick)
	}
	if !slices.Contains(shapes, k.MatVec) {
		shapes = append(shapes, k.MatVec)
	}
	var vs []matVariant
	for _, sh := range shapes {
		// The decode kernel has no standard reference shape: the built-in
		// default is the one to beat.
		vs = append(vs, matVariant{name: sh.String(), ref: sh == k.MatVec, def: sh == k.MatVec,
			rec: func(k *kernels.Kernels, s *vk.Sequence, dst, w, x vk.Binding, qt quant.Type, n, rows, K int) error {
				return k.MatVecWith(s, dst, w, x, qt, n, rows, K, sh)
			}})
	}
	vs = append(vs, sw.o.extraMatVec...)
	tables, err := sw.matrices(k, m, KernelMatVec, 1, vs)
	if err != nil {
		return err
	}
	r.Tables = append(r.Tables, tables...)
	if i := choose(tables); i >= 0 && i < len(shapes) {
		s := shapes[i]
		p.MatVec = &MatVec{Lanes: s.Lanes, Rows: s.Rows, Unroll: s.Unroll, Wave: s.Wave}
	} else {
		r.Unchosen = append(r.Unchosen, KernelMatVec)
	}
	return nil
}

// seedRows is how many distinct random rows a test matrix repeats: the
// values don't matter for speed, and a prime count keeps the repetition
// from lining up with any tile, so a kernel that mixes up rows is caught.
const seedRows = 67

// matrixCase is one weight shape on the device with its CPU reference.
type matrixCase struct {
	mat     Matrix
	n       int
	x, dst  *vk.Buffer
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
// (quantized with quant.Quantize), n random activation columns, and copies
// of the matrix filling minBytes; and computes the reference products of
// the checked columns in float64 from the dequantized rows.
func (sw *sweeper) newMatrixCase(mat Matrix, n int, minBytes int64) (c *matrixCase, err error) {
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
	defer func() {
		if err != nil {
			c.free()
		}
	}()
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
	for _, mat := range m.Matrices {
		// Decode reads each weight once per token: to measure memory and
		// not a cache, a run reads copies of the matrix totalling 256 MiB
		// or more (an H100's L2 is 50 MiB). Prefill is compute bound. A
		// CPU driver (lavapipe) is measured as is: the copies would only
		// multiply its run time.
		var minBytes int64
		if kernel == KernelMatVec && !sw.o.Quick && sw.dev.Info().Type != "cpu" {
			minBytes = 256 << 20
		}
		c, err := sw.newMatrixCase(mat, n, minBytes)
		if err != nil {
			return nil, fmt.Errorf("tune: %s %v: %w", kernel, mat, err)
		}
		t := Table{Kernel: kernel, Shape: fmt.Sprintf("%v %v, %d column(s)", mat, mat.Names, n), Unit: "GFLOPS", Weight: mat.Count}
		work := 2 * float64(n) * float64(mat.Rows) * float64(mat.K)
		if kernel == KernelMatVec {
			t.Unit, work = "GB/s", float64(mat.Rows)*float64(c.rowSize)
		}
		for _, v := range vs {
			cell := Cell{Variant: v.name, Ref: v.ref, Default: v.def,
				Bound: dotBound(mat.K, v.f16 && mat.Type.BlockSize() > 1, v.x16)}
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
