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
