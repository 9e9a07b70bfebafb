package kernels

import (
	"path/filepath"
	"testing"

	"github.com/vkinfer/vkinfer/attention"
	"github.com/vkinfer/vkinfer/quant"
)

// TestDefaults picks the built-in shapes for recorded devices: the 64x64
// tile where workgroup memory holds it (48 KiB on NVIDIA, 64 KiB on AMD),
// 32x32 on lavapipe's 32 KiB; every choice fits its device.
func TestDefaults(t *testing.T) {
	big, small := defaultTiles[0], defaultTiles[len(defaultTiles)-1]
	for _, c := range []struct {
		file string
		want Tile
	}{
		{"nvidia-h200-proprietary.json", big},
		{"nvidia-rtx2070-nvidia-linux.json", big},
		{"amd-rx7900xtx-radv.json", big},
		{"amd-rx580-radv.json", big},
		{"intel-arc-a770-anv.json", big},
		{"lavapipe-mesa22.json", small},
		{"cpu-llvmpipe-lavapipe.json", small},
	} {
		d, err := attention.LoadDevice(filepath.Join("..", "..", "..", "shared", "testdata", "devices", c.file))
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
		// The 64x64 8-bit tile fits 32 KiB exactly, so every device gets it.
		if tileQ8 != defaultQ8Tiles[0] || tileQ8.Q8SharedBytes(quant.Q6_K) > d.SharedMemory {
			t.Errorf("%s: 8-bit tile %v (%d bytes), want %v", c.file, tileQ8, tileQ8.Q8SharedBytes(quant.Q6_K), defaultQ8Tiles[0])
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
