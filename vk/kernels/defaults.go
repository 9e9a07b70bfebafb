package kernels

import "github.com/vkinfer/vkinfer/quant"

// The built-in shapes, used where no tuning profile matches the device.
// They are the winners of `infer tune` on an NVIDIA H200 for the
// Llama-3-8B shapes (docs/TUNING.md): for the matrix-vector kernel, 128
// lanes over 4 rows took 25 µs on the 14336x4096 Q4_K FFN matrices where
// the previous 64x2x2 default took 225 µs; for prefill, the 64x64 tile
// with 4x4 micro-tiles and f16 weights ran 3.0-5.9x the 16x16 reference
// and 1.4-1.7x the previous 32x32 default. No other vendor has been
// measured yet, so every device starts from these, with the largest tile
// its shared memory and workgroup size allow.
var (
	defaultMatVec = MatVecShape{Lanes: 128, Rows: 4, Unroll: 1}
	// defaultTiles in order of preference.
	defaultTiles = []Tile{
		{BM: 64, BN: 64, TM: 4, TN: 4, F16: true},
		{BM: 32, BN: 32, TM: 4, TN: 4, F16: true},
	}
)

// Defaults returns the matrix-vector shape and the prefill tile for a
// device with sharedMemory bytes of workgroup memory and at most
// invocations per workgroup: the first preferred tile that fits every
// weight type (K-quants need the most), else the smallest.
func Defaults(sharedMemory, invocations int) (MatVecShape, Tile) {
	mv := defaultMatVec
	mv.Lanes = min(mv.Lanes, invocations)
	for _, t := range defaultTiles {
		if t.SharedBytes(quant.Q4_K) <= sharedMemory && t.Invocations() <= invocations {
			return mv, t
		}
	}
	return mv, defaultTiles[len(defaultTiles)-1]
}
