package backend

import "testing"

// TestSlots checks the positions each layer keeps: the context for global
// layers, Window+Batch-1 capped at the context for sliding ones.
func TestSlots(t *testing.T) {
	c := Cache{Layers: 4, Context: 100, KVDim: 8, Windows: []int{0, 8, 200, 1}, Batch: 16}
	want := []int{100, 23, 100, 16}
	total := 0
	for l, w := range want {
		if got := c.Slots(l); got != w {
			t.Errorf("layer %d (window %d): %d slots, want %d", l, c.Window(l), got, w)
		}
		total += w
	}
	if got := c.TotalSlots(); got != total {
		t.Errorf("TotalSlots %d, want %d", got, total)
	}
	// No batch size: no ring can be smaller than the context.
	c.Batch = 0
	if got := c.Slots(1); got != 100 {
		t.Errorf("batch 0: %d slots, want the context", got)
	}
	// No windows: every layer is global.
	if got := (Cache{Layers: 3, Context: 10, KVDim: 2}).TotalSlots(); got != 30 {
		t.Errorf("global cache: %d slots, want 30", got)
	}
}
