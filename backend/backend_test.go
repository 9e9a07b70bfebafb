package backend

import (
	"strings"
	"testing"
)

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

// TestCheckRows: the rows a program is run with are checked against what
// it was recorded for and what the cache holds.
func TestCheckRows(t *testing.T) {
	c := Cache{Layers: 1, Context: 10, KVDim: 2, Seqs: 3, Batch: 4}
	for _, tc := range []struct {
		what              string
		rows              bool
		tokens, seqs, pos []int32
		want              string // "" for none
	}{
		{"consecutive of sequence 2", false, []int32{1, 2}, []int32{2, 2}, []int32{4, 5}, ""},
		{"one of each", true, []int32{1, 2, 3}, []int32{2, 0, 1}, []int32{9, 0, 4}, ""},
		{"too few positions", true, []int32{1, 2, 3}, []int32{2, 0, 1}, []int32{9, 0}, "3 tokens, 3 sequences and 2 positions"},
		{"a sequence the cache lacks", true, []int32{1, 2, 3}, []int32{2, 3, 1}, []int32{9, 0, 4}, "sequence 3, the cache holds 3"},
		{"past the context", true, []int32{1, 2, 3}, []int32{2, 0, 1}, []int32{9, 10, 4}, "position 10 outside"},
		{"negative position", false, []int32{1, 2, 3}, []int32{0, 0, 0}, []int32{-1, 0, 1}, "position -1 outside"},
		{"not consecutive", false, []int32{1, 2, 3}, []int32{0, 0, 0}, []int32{1, 2, 4}, "row 2: sequence 0 at position 4"},
		{"two sequences in a prefill", false, []int32{1, 2, 3}, []int32{0, 1, 0}, []int32{1, 2, 3}, "row 1: sequence 1"},
		{"a prompt beside a decode", true, []int32{1, 2, 3, 4}, []int32{0, 1, 0, 0}, []int32{3, 2, 1, 2}, ""},
		{"one position twice", true, []int32{1, 2, 3}, []int32{0, 1, 0}, []int32{1, 2, 1}, "rows 0 and 2: sequence 0 at positions 1 and 1"},
		{"wider than a batch", true, []int32{1, 2, 3}, []int32{0, 1, 0}, []int32{1, 2, 5}, "less than 4 apart"},
	} {
		err := c.CheckRows(len(tc.tokens), tc.rows, tc.tokens, tc.seqs, tc.pos)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.what, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want an error with %q", tc.what, err, tc.want)
		}
	}
}
