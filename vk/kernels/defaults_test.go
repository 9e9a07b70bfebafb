package kernels

import (
	"testing"

	"github.com/vkinfer/vkinfer/attention"
	"github.com/vkinfer/vkinfer/internal/fixtures"
	"github.com/vkinfer/vkinfer/quant"
)

// TestDefaults picks the built-in shapes for recorded devices: the 64x64
// tile where workgroup memory holds it (48 KiB on NVIDIA, 64 KiB on AMD),
// 32x32 on lavapipe's 32 KiB, and for 8-bit activations 32x256 (41 KiB)
// and 32x128; every choice fits its device.
func TestDefaults(t *testing.T) {
	big, small := defaultTiles[0], defaultTiles[len(defaultTiles)-1]
	big8, small8 := defaultQ8Tiles[0], defaultQ8Tiles[1]
	for _, c := range []struct {
		file         string
		want, wantQ8 Tile
	}{
		{"nvidia-h200-proprietary.json", big, big8},
		{"nvidia-rtx2070-nvidia-linux.json", big, big8},
		{"amd-rx7900xtx-radv.json", big, big8},
		{"amd-rx580-radv.json", big, big8},
		{"intel-arc-a770-anv.json", big, big8},
		{"lavapipe-mesa22.json", small, small8},
		{"cpu-llvmpipe-lavapipe.json", small, small8},
	} {
		d, err := attention.LoadDevice(fixtures.Path(t, "devices", c.file))
		if err != nil {
			t.Fatal(err)
		}
		if d.MaxWorkgroupInvocations == 0 {
			d.MaxWorkgroupInvocations = 1024 // what RADV reports on every RDNA card; this record lacks it
		}
		mv, tile, tileQ8 := Defaults(d.SharedMemory, d.MaxWorkgroupInvocations)
		if tile != c.want || tile.SharedBytes(quant.Q6_K) > d.SharedMemory || tile.Invocations() > d.MaxWorkgroupInvocations {
			t.Errorf("%s (%d bytes shared, %d invocations): tile %v, want %v", c.file, d.SharedMemory, d.MaxWorkgroupInvocations, tile, c.want)
		}
		if tileQ8 != c.wantQ8 || tileQ8.Q8SharedBytes(quant.Q6_K) > d.SharedMemory {
			t.Errorf("%s: 8-bit tile %v (%d bytes), want %v", c.file, tileQ8, tileQ8.Q8SharedBytes(quant.Q6_K), c.wantQ8)
		}
		if mv != defaultMatVec {
			t.Errorf("%s: matvec %v, want %v", c.file, mv, defaultMatVec)
		}
	}
	// A device below the Vulkan minimums still gets a shape it can run.
	if mv, tile, tileQ8 := Defaults(16384, 128); mv.Lanes > 128 || tile != small || tileQ8 != defaultQ8Tiles[len(defaultQ8Tiles)-1] {
		t.Errorf("minimum device: %v %v %v", mv, tile, tileQ8)
	}
}

// TestMatVecLanes sizes the 8-bit matrix-vector workgroups by the matrix:
// 32 lanes where rows are short and many (Llama-3-8B's gate and up on an
// H200's 132 SMs), more where rows are long or few.
func TestMatVecLanes(t *testing.T) {
	for _, c := range []struct{ rows, K, cus, max, least, want int }{
		{14336, 4096, 132, 1024, 0, 32},  // gate, up: 3584 groups
		{14336, 4096, 132, 1024, 32, 32}, // a required wave32 changes nothing
		{14336, 4096, 132, 1024, 64, 64}, // a required wave64: whole subgroups
		{1024, 4096, 132, 1024, 64, 128}, // more lanes than the wave where the matrix wants them
		{4096, 4096, 132, 1024, 0, 64},   // q, o: 1024 groups
		{1024, 4096, 132, 1024, 0, 128},  // k, v: 256 groups
		{4096, 14336, 132, 1024, 0, 128}, // down: 448 slices a row
		{128256, 4096, 132, 1024, 0, 32}, // output
		{4096, 8192, 0, 1024, 0, 64},     // 256 slices; 32 units assumed
		{14336, 4096, 132, 64, 0, 32},
		{1024, 4096, 132, 64, 0, 64}, // capped by the workgroup limit
	} {
		if got := matVecLanes(c.rows, c.K, 4, c.cus, c.max, c.least); got != c.want {
			t.Errorf("%d×%d on %d units (at most %d invocations, at least %d): %d lanes, want %d", c.rows, c.K, c.cus, c.max, c.least, got, c.want)
		}
	}
}

// TestTileQ8For gives short batches narrow tiles, and batches that fill
// more than half of the wide tile's columns the wide tile itself; with a
// narrower wide tile (a 32 KiB device) fewer batches count as short.
func TestTileQ8For(t *testing.T) {
	k := &Kernels{TileQ8: defaultQ8Tiles[0]} // 32×256
	for _, c := range []struct {
		n  int
		bn int
	}{{9, 32}, {32, 32}, {33, 64}, {64, 64}, {100, 64}, {128, 64}, {129, 256}, {512, 256}} {
		if got := k.TileQ8For(c.n); got.BN != c.bn {
			t.Errorf("%d columns: tile %v, want %d columns wide", c.n, got, c.bn)
		}
	}
	if got := k.TileQ8For(128); got != (Tile{BM: 32, BN: 64, TM: 4, TN: 8}) {
		t.Errorf("128 columns: tile %v, want 32x64/4x8", got)
	}
	k.TileQ8 = defaultQ8Tiles[1] // 32×128
	if got := k.TileQ8For(100); got != k.TileQ8 {
		t.Errorf("100 columns under a 128-wide tile: %v, want the tile itself", got)
	}
}

// TestDefaultMatVecBatch: batches of sequences take the matrix-vector
// kernels only where the 8-bit path is the device's own choice.
func TestDefaultMatVecBatch(t *testing.T) {
	for _, c := range []struct {
		dot, accelerated bool
		want             int
	}{{true, true, DefaultMatVecBatch}, {true, false, MaxMatVecCols}, {false, false, MaxMatVecCols}} {
		if got := defaultMatVecBatch(c.dot, c.accelerated); got != c.want {
			t.Errorf("integer dot %v, accelerated %v: %d, want %d", c.dot, c.accelerated, got, c.want)
		}
	}
	k := &Kernels{Q8: false, MatVecBatch: 32}
	if k.MatVecTakes(9) || !k.MatVecTakes(8) {
		t.Errorf("without 8-bit activations the matrix-vector kernels take 8 columns at most")
	}
	k.Q8 = true
	if !k.MatVecTakes(32) || k.MatVecTakes(33) {
		t.Errorf("with 8-bit activations and MatVecBatch 32: MatVecTakes(32) %v, MatVecTakes(33) %v", k.MatVecTakes(32), k.MatVecTakes(33))
	}
}

// TestMoEDecodeShapes pins the mixture-of-experts decode shapes on an
// H200's limits (h200Limits), Qwen3-30B-A3B's experts (768 rows of 2048,
// 8 a token): gate and up on one subgroup of 32 lanes × 4 rows, since the
// 8 experts' rows make the workgroups; the down experts 64 lanes × 2
// rows, twice the lanes for Q6_K; at wave64 (RDNA's policy) whole
// subgroups of 64. A profile's lanes keep Q6_K's; f32 activations keep
// the plain shape with gated rows. Decode's router takes one expert a
// workgroup, prefill's 16.
func TestMoEDecodeShapes(t *testing.T) {
	k := h200Limits()
	k.MatVec, k.MatVecQ8 = defaultMatVec, defaultMatVecQ8
	for _, c := range []struct {
		what      string
		got, want MatVecShape
	}{
		{"gate, up", k.IDGLUShape(true, 768, 2048, 8), MatVecShape{Lanes: 32, Rows: 4, Unroll: 1}},
		{"down Q4_K", k.IDSumShape(quant.Q4_K, true, 2048, 768, 8), MatVecShape{Lanes: 64, Rows: 2, Unroll: 1}},
		{"down Q6_K", k.IDSumShape(quant.Q6_K, true, 2048, 768, 8), MatVecShape{Lanes: 128, Rows: 2, Unroll: 1}},
		{"gate, up in f32", k.IDGLUShape(false, 768, 2048, 8), MatVecShape{Lanes: 128, Rows: gatedRows, Unroll: 1}},
		{"down Q6_K in f32", k.IDSumShape(quant.Q6_K, false, 2048, 768, 8), defaultMatVec},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.what, c.got, c.want)
		}
	}
	k.MatVecQ8.Wave = 64
	if got, want := k.IDGLUShape(true, 768, 2048, 8), (MatVecShape{Lanes: 64, Rows: 4, Unroll: 1, Wave: 64}); got != want {
		t.Errorf("gate, up at wave64: %v, want %v", got, want)
	}
	k.MatVecQ8 = MatVecShape{Lanes: 64, Rows: 2, Unroll: 1} // a profile's
	if got := k.IDSumShape(quant.Q6_K, true, 2048, 768, 8); got.Lanes != 64 {
		t.Errorf("down Q6_K under a profile's 64 lanes: %v", got)
	}
	if RouterRowsFor(1) != 1 || RouterRowsFor(MaxMatVecCols) != 1 || RouterRowsFor(MaxMatVecCols+1) != 16 {
		t.Errorf("router experts a workgroup: %d, %d, %d", RouterRowsFor(1), RouterRowsFor(MaxMatVecCols), RouterRowsFor(MaxMatVecCols+1))
	}
}
