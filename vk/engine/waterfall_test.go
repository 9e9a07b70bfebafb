package engine

import (
	"math"
	"strings"
	"testing"

	"github.com/vkinfer/vkinfer/vk"
)

// TestWaterfallLayout: gaps, busy time and bytes from made-up timings,
// with two dispatches that overlap (no barrier between them), one that
// starts after an idle gap, a KV-cache read and an uncounted dispatch.
func TestWaterfallLayout(t *testing.T) {
	ts := []vk.OpTime{
		{Name: "a", Start: 0, Micros: 10},
		{Name: "b", Start: 4, Micros: 10}, // overlaps a: no gap, busy 10..14
		{Name: "c", Start: 6, Micros: 2},  // inside b: busy 0
		{Name: "d", Start: 20, Micros: 5}, // 6 µs idle after b
		{Name: "e", Start: 25, Micros: 1},
	}
	tr := []traffic{
		{layer: -1, weights: 100, other: 8, counted: true},
		{layer: 0, weights: 1000, other: 16, counted: true},
		{layer: 0, other: 4, counted: true},
		{layer: 0, other: 64, kvRow: 10, kvSlots: 8, counted: true},
		{layer: 0},
	}
	w := waterfall(ts, tr, 5, 1, 1)
	want := []Dispatch{
		{Name: "a", Layer: -1, Start: 0, End: 10, Gap: 0, Busy: 10, Bytes: 108, Weights: 100},
		{Name: "b", Layer: 0, Start: 4, End: 14, Gap: 0, Busy: 4, Bytes: 1016, Weights: 1000},
		{Name: "c", Layer: 0, Start: 6, End: 8, Gap: 0, Busy: 0, Bytes: 4},
		{Name: "d", Layer: 0, Start: 20, End: 25, Gap: 6, Busy: 5, Bytes: 64 + 6*10}, // positions 0..5
		{Name: "e", Layer: 0, Start: 25, End: 26, Gap: 0, Busy: 1, Bytes: -1},
	}
	if w == nil || len(w.Dispatches) != len(want) {
		t.Fatalf("waterfall %+v", w)
	}
	total := 0.0
	for i, d := range w.Dispatches {
		if d != want[i] {
			t.Errorf("dispatch %d: %+v, want %+v", i, d, want[i])
		}
		total += d.Gap + d.Busy
	}
	if total != 26 {
		t.Errorf("gaps and busy times sum to %g µs, want the span, 26", total)
	}
	// The ring bounds the positions read: 8 slots at position 100.
	if d := waterfall(ts, tr, 100, 1, 1).Dispatches[3]; d.Bytes != 64+8*10 {
		t.Errorf("KV bytes past the ring: %d, want %d", d.Bytes, 64+8*10)
	}
	if got := w.Dispatches[1].GBps(); math.Abs(got-1016.0/10/1e3) > 1e-12 {
		t.Errorf("GB/s %g", got)
	}
	if waterfall(ts, tr[:4], 0, 1, 1) != nil {
		t.Error("a waterfall from timings and traffic of different lengths")
	}

	var b strings.Builder
	WriteWaterfall(&b, w)
	out := b.String()
	for _, s := range []string{"position 5", "layer in ", "layer 0 ", "token", "idle      6.0"} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
	if lines := strings.Count(out, "\n"); lines != 2+5+2+1 {
		t.Errorf("%d lines, want a title, a header, 5 dispatches, 2 layers and the token:\n%s", lines, out)
	}
}

func TestWeightLayer(t *testing.T) {
	for name, want := range map[string]int{
		"blk.0.attn_q.weight": 0, "blk.31.ffn_down.weight": 31, "blk.2.attn_qkv.weight[rows 0:64]": 2,
		"token_embd.weight": -1, "output.weight": -1, "blk.x.attn_q.weight": -1, "blk.": -1, "blk.-1.a": -1,
	} {
		if got := weightLayer(name); got != want {
			t.Errorf("%q: layer %d, want %d", name, got, want)
		}
	}
}
