package kernels

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vkinfer/vkinfer/coopmat"
	"github.com/vkinfer/vkinfer/quant"
	"github.com/vkinfer/vkinfer/vk"
)

var (
	sweep    = flag.Bool("sweep", false, "benchmarks: try several matrix-vector shapes, not just the default")
	cols     = flag.String("cols", "512", "BenchmarkMatMulQ4K, BenchmarkMatMulCoop, BenchmarkMatVecBatch: activation columns, a comma list")
	matrices = flag.String("matrices", "llama3", "BenchmarkMatMulCoop, BenchmarkMatVecBatch: the model whose matrices to time: llama3 or qwen3")
)

// The benchmarks use their own device without the validation layer, with
// timestamps on so that GB/s is GPU time, not submission overhead.
var (
	benchOnce sync.Once
	benchDev  *vk.Device
	benchK    *Kernels
	benchErr  error
)

func benchSetup(b *testing.B) *Kernels {
	benchOnce.Do(func() {
		benchDev, benchErr = vk.Open(vk.Options{Device: -1, AllowCPU: true})
		if benchErr == nil {
			benchDev.SetProfiling(true)
			benchK = New(benchDev)
		}
	})
	if benchErr != nil {
		if os.Getenv("VKINFER_NO_VULKAN") == "1" {
			b.Skipf("no Vulkan device: %v", benchErr)
		}
		b.Fatal(benchErr)
	}
	return benchK
}

// benchMatrix is a weight matrix a benchmark times: type, rows, K.
type benchMatrix struct {
	t       quant.Type
	rows, K int
}

// llamaMatrices are the Llama-3-8B Q4_K_M matrices the product benchmarks
// time: the FFN's in Q4_K (up/gate, down) and the down projection in Q6_K
// as half the layers store it, and the attention's 4096x4096.
var llamaMatrices = []benchMatrix{{quant.Q4_K, 14336, 4096}, {quant.Q4_K, 4096, 14336}, {quant.Q6_K, 4096, 14336}, {quant.Q4_K, 4096, 4096}}

// qwenMatrices are Qwen3-30B-A3B's dense matrices, its attention's (the
// experts have BenchmarkMoEPrefill): q, o, and k and v in both of their
// Q4_K_M types. Small enough that the tile's workgroup count matters.
var qwenMatrices = []benchMatrix{{quant.Q4_K, 4096, 2048}, {quant.Q4_K, 2048, 4096}, {quant.Q4_K, 512, 2048}, {quant.Q6_K, 512, 2048}}

// benchModel is -matrices' list.
func benchModel(b *testing.B) []benchMatrix {
	switch *matrices {
	case "llama3":
		return llamaMatrices
	case "qwen3":
		return qwenMatrices
	}
	b.Fatalf("-matrices %q: want llama3 or qwen3", *matrices)
	return nil
}

// benchCols is -cols: the activation column counts to measure, in order.
func benchCols(b *testing.B) []int {
	var ns []int
	for _, c := range strings.Split(*cols, ",") {
		n, err := strconv.Atoi(c)
		if err != nil || n < 1 {
			b.Fatalf("-cols %q: want a comma list of positive counts", *cols)
		}
		ns = append(ns, n)
	}
	return ns
}

// The matrices of a Llama-3-8B FFN: up/gate (14336 rows of 4096) and down
// (4096 rows of 14336).
var benchShapes = [][2]int{{4096, 14336}, {14336, 4096}}

func BenchmarkMatVecQ4K(b *testing.B)  { benchMatVec(b, quant.Q4_K) }
func BenchmarkMatVecQ6K(b *testing.B)  { benchMatVec(b, quant.Q6_K) }
func BenchmarkMatVecQ8_0(b *testing.B) { benchMatVec(b, quant.Q8_0) }
func BenchmarkMatVecF16(b *testing.B)  { benchMatVec(b, quant.F16) }

// benchMatVec reports the rate at which the decode kernel (one activation
// column) reads weight bytes, with f32 activations and, for the types that
// have it on devices with integer dot products, with 8-bit ones (q8). It cycles through enough copies of the matrix
// (256 MiB or more) that a GPU's L2 (50 MiB on H100/H200) cannot hold them,
// with a barrier between dispatches as in a forward pass.
func benchMatVec(b *testing.B, qt quant.Type) {
	k := benchSetup(b)
	shapes := []MatVecShape{k.MatVec}
	if *sweep {
		for _, lanes := range []int{32, 64, 128} {
			for _, rows := range []int{1, 2, 4} {
				for _, unroll := range []int{1, 2, 4, 8} {
					shapes = append(shapes, MatVecShape{Lanes: lanes, Rows: rows, Unroll: unroll})
				}
			}
		}
	}
	for _, dims := range benchShapes {
		rows, K := dims[0], dims[1]
		mats := benchMatrices(b, qt, rows, K, 256<<20)
		x, err := benchDev.NewBuffer(max(f32(K), Q8Bytes(1, K)), false)
		if err != nil {
			b.Fatal(err)
		}
		dst, err := benchDev.NewBuffer(f32(rows), false)
		if err != nil {
			b.Fatal(err)
		}
		modes := []bool{false}
		if HasQ8(qt) && k.info.IntegerDot {
			modes = append(modes, true)
		}
		for _, q8 := range modes {
			shapes := shapes
			if q8 {
				shapes = append([]MatVecShape{k.MatVecQ8For(rows, K)}, shapes[1:]...)
			}
			for _, sh := range shapes {
				name := fmt.Sprintf("%dx%d/%s", rows, K, sh)
				if q8 {
					name += "/q8"
				}
				rec := func(s *vk.Sequence, w, dst vk.Binding) error {
					if q8 {
						return k.MatVecQ8With(s, dst, w, whole(x), nil, qt, 1, rows, K, sh)
					}
					return k.MatVecWith(s, dst, w, whole(x), qt, 1, rows, K, sh)
				}
				benchMatVecRun(b, name, mats, whole(dst), rec)
				benchMatVecStream(b, name+"/stream", mats, f32(rows), rec)
			}
		}
		for _, m := range mats {
			m.Free()
		}
		x.Free()
		dst.Free()
	}
}

// benchMatVecRun times rec over every matrix of mats, a few times each,
// with a barrier after each product (the products write one dst).
func benchMatVecRun(b *testing.B, name string, mats []*vk.Buffer, dst vk.Binding, rec func(s *vk.Sequence, w, dst vk.Binding) error) {
	b.Run(name, func(b *testing.B) {
		s := benchDev.NewSequence()
		defer s.Free()
		const perCopy = 4
		for i := 0; i < perCopy*len(mats); i++ {
			if err := rec(s, whole(mats[i%len(mats)]), dst); err != nil {
				b.Fatal(err)
			}
			s.Barrier()
		}
		if err := s.End(); err != nil {
			b.Fatal(err)
		}
		bytes := mats[0].Size() * int64(perCopy*len(mats))
		b.SetBytes(bytes)
		gpu := runTimed(b, s)
		if gpu > 0 {
			b.ReportMetric(float64(bytes)*float64(b.N)/gpu/1e3, "GB/s")
			b.ReportMetric(gpu/float64(b.N*perCopy*len(mats)), "us/op")
		}
	})
}

// benchMatVecStream is benchMatVecRun without the barriers: each product
// writes its own slice of a dst, so none depends on another and the GPU may
// overlap them, as it does the engine's independent neighbours (the q, k
// and v projections; gate and up). A barrier drains the GPU, and the
// products behind one wait for the slowest workgroup of the product before
// it; the copy yardstick (BenchmarkCopyShader) streams 256 MiB per dispatch
// and barely pays that. Timestamps would serialize the dispatches, so this
// is wall time over whole runs of 16 passes through mats, with profiling
// off: submission and the wait for the fence count against the kernel.
func benchMatVecStream(b *testing.B, name string, mats []*vk.Buffer, dstBytes int64, rec func(s *vk.Sequence, w, dst vk.Binding) error) {
	b.Run(name, func(b *testing.B) {
		benchDev.SetProfiling(false)
		defer benchDev.SetProfiling(true)
		const perCopy = 16
		n := perCopy * len(mats)
		stride := (dstBytes + 255) &^ 255 // a binding offset every device accepts
		dst, err := benchDev.NewBuffer(stride*int64(n), false)
		if err != nil {
			b.Fatal(err)
		}
		defer dst.Free()
		s := benchDev.NewSequence()
		defer s.Free()
		for i := range n {
			if err := rec(s, whole(mats[i%len(mats)]), vk.Binding{Buf: dst, Off: stride * int64(i), Size: dstBytes}); err != nil {
				b.Fatal(err)
			}
		}
		if err := s.End(); err != nil {
			b.Fatal(err)
		}
		if err := s.Run(); err != nil { // warm-up
			b.Fatal(err)
		}
		bytes := mats[0].Size() * int64(n)
		b.SetBytes(bytes)
		b.ResetTimer()
		start := time.Now()
		for range b.N {
			if err := s.Run(); err != nil {
				b.Fatal(err)
			}
		}
		us := float64(time.Since(start).Microseconds())
		b.ReportMetric(float64(bytes)*float64(b.N)/us/1e3, "GB/s")
		b.ReportMetric(us/float64(b.N*n), "us/op")
	})
}

// benchMatrices returns copies of a rows x K matrix of type qt filling at
// least minBytes (at least one copy). The values don't matter for bandwidth: 64 random rows are
// quantized once and repeated, and the copies are made on the device.
func benchMatrices(b *testing.B, qt quant.Type, rows, K int, minBytes int64) []*vk.Buffer {
	rb, err := qt.RowBytes(K)
	if err != nil {
		b.Fatal(err)
	}
	const seedRows = 64
	seed, err := quant.Quantize(qt, weights(rand.New(rand.NewPCG(1, 2)), seedRows, K))
	if err != nil {
		b.Fatal(err)
	}
	size := round4(int64(rows) * int64(rb))
	raw := make([]byte, size)
	for off := 0; off < len(raw); off += len(seed) {
		copy(raw[off:], seed)
	}
	copies := max(1, int((minBytes+size-1)/size))
	mats := make([]*vk.Buffer, copies)
	s := benchDev.NewSequence()
	defer s.Free()
	for i := range mats {
		if mats[i], err = benchDev.NewBuffer(size, false); err != nil {
			b.Fatal(err)
		}
		if i == 0 {
			if err := mats[0].Write(0, raw); err != nil {
				b.Fatal(err)
			}
		} else {
			s.Copy(whole(mats[i]), whole(mats[0]))
		}
	}
	if err := s.End(); err != nil {
		b.Fatal(err)
	}
	if err := s.Run(); err != nil {
		b.Fatal(err)
	}
	return mats
}

// BenchmarkMatMulQ4K reports the prefill kernel's rate in TFLOP/s (2*M*N*K
// per product) for a 512-token batch through the Llama-3-8B FFN matrices,
// with f32 activations and, where the device has integer dot products,
// 8-bit ones (q8, matmul_q8). With -sweep it tries several tile shapes.
func BenchmarkMatMulQ4K(b *testing.B) {
	k := benchSetup(b)
	ns := benchCols(b)
	tiles := []Tile{k.Tile}
	if *sweep {
		tiles = append(tiles,
			Tile{BM: 16, BN: 16, TM: 2, TN: 2}, Tile{BM: 8, BN: 32, TM: 1, TN: 4},
			Tile{BM: 32, BN: 8, TM: 4, TN: 1, F16: true}, Tile{BM: 32, BN: 32, TM: 4, TN: 4, F16: true},
			Tile{BM: 32, BN: 64, TM: 4, TN: 8, F16: true}, Tile{BM: 16, BN: 64, TM: 2, TN: 8},
			Tile{BM: 13, BN: 13, TM: 1, TN: 1})
	}
	q8Tiles := []Tile{k.TileQ8}
	if *sweep {
		// Narrow tiles for short batches too.
		q8Tiles = append(append(q8Tiles, Q8Tiles...),
			Tile{BM: 32, BN: 32, TM: 4, TN: 4}, Tile{BM: 64, BN: 32, TM: 8, TN: 4}, Tile{BM: 128, BN: 32, TM: 8, TN: 4})
	}
	for _, dims := range benchShapes {
		rows, K := dims[0], dims[1]
		// Compute-bound: one matrix, which L2 may as well serve.
		mats := benchMatrices(b, quant.Q4_K, rows, K, 0)
		n := slices.Max(ns)
		x, err := benchDev.NewBuffer(max(f32(n*K), Q8Bytes(n, K)), false)
		if err != nil {
			b.Fatal(err)
		}
		dst, err := benchDev.NewBuffer(f32(n*rows), false)
		if err != nil {
			b.Fatal(err)
		}
		var variants []tileVariant
		for _, tile := range tiles {
			if k.checkTile(tile, quant.Q4_K, tile.SharedBytes(quant.Q4_K)) == nil { // fits this device
				variants = append(variants, tileVariant{tile, false})
			}
		}
		for _, tile := range q8Tiles {
			if k.info.IntegerDot && k.checkTile(tile, quant.Q4_K, tile.Q8SharedBytes(quant.Q4_K)) == nil {
				variants = append(variants, tileVariant{tile, true})
			}
		}
		for _, n := range ns {
			for _, v := range variants {
				name := fmt.Sprintf("%dx%d/n%d/%v", rows, K, n, v.tile)
				if v.q8 {
					name = fmt.Sprintf("%dx%d/n%d/q8/%dx%d/%dx%d/k%d", rows, K, n, v.tile.BM, v.tile.BN, v.tile.TM, v.tile.TN, v.tile.q8Chunk(quant.Q4_K))
				}
				b.Run(name, func(b *testing.B) {
					rec := k.MatMulTiled
					if v.q8 {
						rec = k.MatMulQ8
					}
					timeProducts(b, mats, n, rows, K, func(s *vk.Sequence, w vk.Binding) error {
						return rec(s, whole(dst), w, whole(x), quant.Q4_K, n, rows, K, v.tile)
					})
				})
			}
		}
		for _, m := range mats {
			m.Free()
		}
		x.Free()
		dst.Free()
	}
}

// timeProducts times a sequence of one product of n columns with each of
// mats (rec records it, a barrier follows) and reports TFLOP/s and µs per
// product.
func timeProducts(b *testing.B, mats []*vk.Buffer, n, rows, K int, rec func(s *vk.Sequence, w vk.Binding) error) {
	s := benchDev.NewSequence()
	defer s.Free()
	for _, m := range mats {
		if err := rec(s, whole(m)); err != nil {
			b.Fatal(err)
		}
		s.Barrier()
	}
	if err := s.End(); err != nil {
		b.Fatal(err)
	}
	if gpu := runTimed(b, s); gpu > 0 {
		flops := 2 * float64(n) * float64(rows) * float64(K) * float64(len(mats)*b.N)
		b.ReportMetric(flops/gpu/1e6, "TFLOP/s")
		b.ReportMetric(gpu/float64(len(mats)*b.N), "us/op")
	}
}

// tileVariant is a prefill tile with f32 or 8-bit activations.
type tileVariant struct {
	tile Tile
	q8   bool
}

// runTimed runs s b.N times and returns the GPU microseconds its dispatches
// took in all (0 when the device has no timestamps).
func runTimed(b *testing.B, s *vk.Sequence) float64 {
	var gpu float64
	b.ResetTimer()
	for range b.N {
		if err := s.Run(); err != nil {
			b.Fatal(err)
		}
		for _, op := range s.Timings() {
			gpu += op.Micros
		}
	}
	return gpu
}

// BenchmarkMatVecBatch compares, for -cols activation columns (a batch of
// sequences decoding together: 1,8,16,32,64), the kernels that can take a
// product of that width on the Llama-3-8B FFN matrices: the matrix-vector
// kernels in groups of MaxMatVecCols columns (f32 and 8-bit activations),
// the 8-bit tiled product (matmul_q8, TileQ8For) and, on devices with
// cooperative matrices, matmul_coopmat (CoopTileForShape) and
// matvec_coopmat (MatVecCoopFor; -sweep tries other splits, row blocks
// and steps). Weights cycle
// through 256 MiB of copies, past any L2, as in decode. What it measures
// sets DefaultMatVecBatch (docs/KERNELS.md).
func BenchmarkMatVecBatch(b *testing.B) {
	k := benchSetup(b)
	kc := New(benchDev)
	defer kc.Close()
	kc.CoopMat = coopmat.Choose(CoopDevice(k.info))
	ns := benchCols(b)
	for _, mat := range benchModel(b) {
		qt, rows, K := mat.t, mat.rows, mat.K
		mats := benchMatrices(b, qt, rows, K, 256<<20)
		n := slices.Max(ns)
		xBytes := max(f32(n*K), Q8Bytes(n, K), F16Bytes(n, K))
		for _, n := range ns {
			xBytes = max(xBytes, kc.MatVecCoopXBytes(kc.MatVecCoopFor(qt, n, rows, K), n, K))
		}
		x, err := benchDev.NewBuffer(xBytes, false)
		if err != nil {
			b.Fatal(err)
		}
		dst, err := benchDev.NewBuffer(f32(n*rows), false)
		if err != nil {
			b.Fatal(err)
		}
		part, err := benchDev.NewBuffer(f32(16*n*rows), false)
		if err != nil {
			b.Fatal(err)
		}
		for _, n := range ns {
			type variant struct {
				name string
				rec  func(s *vk.Sequence, w, dst vk.Binding) error
			}
			vs := []variant{{"matvec", func(s *vk.Sequence, w, dst vk.Binding) error {
				return k.MatVecWith(s, dst, w, whole(x), qt, n, rows, K, k.MatVec)
			}}}
			if HasQ8(qt) && k.info.IntegerDot {
				shapes := []MatVecShape{k.MatVecQ8For(rows, K)}
				if *sweep {
					for _, r := range []int{1, 4, 8, 16} {
						for _, lanes := range []int{32, 64, 128} {
							shapes = append(shapes, MatVecShape{Lanes: lanes, Rows: r, Unroll: 1})
						}
					}
					shapes = append(shapes, MatVecShape{Lanes: 32, Rows: 2, Unroll: 2}, MatVecShape{Lanes: 64, Rows: 2, Unroll: 1},
						MatVecShape{Lanes: 32, Rows: 1, Unroll: 2})
				}
				for _, sh := range shapes {
					vs = append(vs, variant{"matvec_q8/" + sh.String(), func(s *vk.Sequence, w, dst vk.Binding) error {
						return k.MatVecQ8With(s, dst, w, whole(x), nil, qt, n, rows, K, sh)
					}})
				}
				if n > MaxMatVecCols {
					tile := k.TileQ8For(n)
					vs = append(vs, variant{"matmul_q8", func(s *vk.Sequence, w, dst vk.Binding) error {
						return k.MatMulQ8(s, dst, w, whole(x), qt, n, rows, K, tile)
					}})
				}
			}
			if kc.CoopMat.On() && n > MaxMatVecCols {
				tile := kc.CoopTileForShape(qt, rows, n)
				vs = append(vs, variant{"coopmat/" + tile.String(), func(s *vk.Sequence, w, dst vk.Binding) error {
					return kc.MatMulCoop(s, dst, w, vk.Binding{Buf: x, Size: F16Bytes(n, K)}, qt, n, rows, K, tile)
				}})
				// The engine's choice (CoopSplitFor), then K cut into splits
				// runs of other tiles, the partials added by split_sum.
				parts := func(tile CoopTile, splits int) func(s *vk.Sequence, w, dst vk.Binding) error {
					return func(s *vk.Sequence, w, dst vk.Binding) error {
						if err := kc.MatMulCoopSplit(s, whole(part), w, vk.Binding{Buf: x, Size: F16Bytes(n, K)}, qt, n, rows, K, tile, splits); err != nil {
							return err
						}
						s.Barrier()
						return kc.SplitSum(s, dst, whole(part), nil, n*rows, splits)
					}
				}
				if ptile, psplits := kc.CoopSplitFor(qt, n, rows, K); psplits > 1 {
					vs = append(vs, variant{fmt.Sprintf("coop_engine/%s/s%d", ptile, psplits), parts(ptile, psplits)})
				}
				if *sweep {
					for _, tile := range []CoopTile{narrowCoopTiles[0], {BM: 64, BN: 16, WM: 16, WN: 16, BK: 64, KC: 64},
						{BM: 32, BN: 32, WM: 16, WN: 16, BK: 64, KC: 64}, {BM: 128, BN: 16, WM: 32, WN: 16, BK: 64, KC: 64}} {
						if kc.CheckCoopTile(tile, qt) != nil {
							continue
						}
						for _, splits := range []int{2, 4, 8, 16} {
							vs = append(vs, variant{fmt.Sprintf("coopsplit/%s/s%d", tile, splits), parts(tile, splits)})
						}
					}
				}
				shapes := []MatVecCoopShape{kc.MatVecCoopFor(qt, n, rows, K)}
				if *sweep {
					for _, split := range []int{1, 2, 4, 8} {
						for _, g := range []int{4, 8} {
							for _, fm := range []int{1, 2} {
								for _, bk := range []int{64, 128, 256} {
									sh := shapes[0]
									sh.Subgroups, sh.Split, sh.FM, sh.BK = max(g, split), split, fm, bk
									if !slices.Contains(shapes, sh) && kc.checkMatVecCoop(sh, qt) == nil && K%bk == 0 {
										shapes = append(shapes, sh)
									}
								}
							}
						}
					}
				}
				for _, sh := range shapes {
					vs = append(vs, variant{"matvec_coopmat/" + sh.String(), func(s *vk.Sequence, w, dst vk.Binding) error {
						return kc.MatVecCoopWith(s, dst, w, vk.Binding{Buf: x, Size: kc.MatVecCoopXBytes(sh, n, K)}, qt, n, rows, K, sh)
					}})
				}
			}
			for _, v := range vs {
				benchMatVecRun(b, fmt.Sprintf("%dx%d/%s/n%d/%s", rows, K, qt, n, v.name), mats,
					vk.Binding{Buf: dst, Size: f32(n * rows)}, v.rec)
			}
		}
		for _, m := range mats {
			m.Free()
		}
		x.Free()
		dst.Free()
		part.Free()
	}
}

// BenchmarkNormFold times the products that write the residual of a
// Llama-3-8B layer (the o and down projections, one column) as decode
// chains them: plain, then the plain product followed by the RMSNorm that
// writes the next products' q8 copy (what the fold replaces: two
// dependent dispatches), then with the norm folded in (NormOut), in the
// built-in shape and in shapes of other rows a workgroup (whole blocks of
// 32 rows take no counters); with -sweep also in 32 to 128 lanes × 1 to 4
// rows. Qwen3-30B-A3B's o projection (2048×4096) is the fourth matrix: a
// chain of plain products put other shapes first than the engine's, whose
// products fold the norm (docs/BENCHMARKS.md, thirty-third session).
func BenchmarkNormFold(b *testing.B) {
	k := benchSetup(b)
	if !k.info.IntegerDot {
		b.Skip("no integer dot products")
	}
	for _, mat := range []benchMatrix{{quant.Q4_K, 4096, 4096}, {quant.Q6_K, 4096, 14336}, {quant.Q4_K, 4096, 14336}, {quant.Q4_K, 2048, 4096}} {
		qt, rows, K := mat.t, mat.rows, mat.K
		mats := benchMatrices(b, qt, rows, K, 256<<20)
		bufs := make([]*vk.Buffer, 6)
		for i, size := range []int64{Q8Bytes(1, K), f32(rows), f32(rows), Q8Bytes(1, rows), NormPartsBytes(1, rows), f32(rows)} {
			var err error
			if bufs[i], err = benchDev.NewBuffer(size, false); err != nil {
				b.Fatal(err)
			}
		}
		x, res, nw, q8, parts, normed := whole(bufs[0]), whole(bufs[1]), whole(bufs[2]), whole(bufs[3]), whole(bufs[4]), whole(bufs[5])
		if err := bufs[2].Write(0, f32Bytes(normals(rand.New(rand.NewPCG(3, 4)), rows, 1))); err != nil {
			b.Fatal(err)
		}
		def := k.MatVecQ8For(rows, K)
		shapes := []MatVecShape{def}
		others := []MatVecShape{{Lanes: 128, Rows: 8, Unroll: 1}, {Lanes: 128, Rows: 16, Unroll: 1}, {Lanes: 128, Rows: 32, Unroll: 1}, {Lanes: 64, Rows: 32, Unroll: 1}}
		if *sweep {
			for _, lanes := range []int{32, 64, 128} {
				for _, r := range []int{1, 2, 4} {
					others = append(others, MatVecShape{Lanes: lanes, Rows: r, Unroll: 1})
				}
			}
		}
		for _, sh := range others {
			if !slices.Contains(shapes, sh) {
				shapes = append(shapes, sh)
			}
		}
		name := fmt.Sprintf("%dx%d/%s", rows, K, qt)
		for _, sh := range shapes {
			benchMatVecRun(b, name+"/plain/"+sh.String(), mats, res, func(s *vk.Sequence, w, dst vk.Binding) error {
				return k.MatVecQ8With(s, dst, w, x, &res, qt, 1, rows, K, sh)
			})
			benchMatVecRun(b, name+"/plain+norm/"+sh.String(), mats, res, func(s *vk.Sequence, w, dst vk.Binding) error {
				if err := k.MatVecQ8With(s, dst, w, x, &res, qt, 1, rows, K, sh); err != nil {
					return err
				}
				s.Barrier()
				return k.RMSNormQ8(s, normed, q8, dst, nw, 1, rows, 1e-5)
			})
			if FoldRows(sh.Rows) {
				benchMatVecRun(b, name+"/fold/"+sh.String(), mats, res, func(s *vk.Sequence, w, dst vk.Binding) error {
					return k.MatVecQ8Norm(s, dst, w, x, &res, qt, 1, rows, K, sh, &NormOut{W: nw, Q8: q8, Parts: parts}, nil)
				})
			}
		}
		for _, m := range append(mats, bufs...) {
			m.Free()
		}
	}
}
