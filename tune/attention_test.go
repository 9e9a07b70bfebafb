package tune

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/vkinfer/vkinfer/vk"
	"github.com/vkinfer/vkinfer/vk/flashattn"
)

// TestAttentionSharedScratch checks that the variants of an attention table
// record on the problem's own buffers: the split-k partials of every
// variant, whatever its split count, go to the one scratch buffer allocated
// with the problem, so no cell allocates (on an H200 the first cell of a
// fresh problem measured 4.6× slower than the same geometry later on, and
// allocating after frees made an H100 benchmark up to 4× slower), and every
// variant still passes parity on it.
func TestAttentionSharedScratch(t *testing.T) {
	d := open(t)
	sw := &sweeper{dev: d, o: Options{Reps: 1, Log: io.Discard}}
	c, err := sw.newAttnCase(tiny, 9, 300)
	if err != nil {
		t.Fatal(err)
	}
	defer c.free()
	vs := []Attention{{}, {Splits: 1}, {Splits: 3}, {Br: 8, Splits: 7}, {Br: 16, Bc: 32, Splits: 2}, {Wave: 64, Splits: 5}}
	fas := make([]*flashattn.FlashAttn, len(vs))
	for i, v := range vs {
		if fas[i], err = flashattn.New(d, v.Options(0)); err != nil {
			t.Fatal(err)
		}
		defer fas[i].Close()
	}
	if err := c.allocScratch(d, fas); err != nil {
		t.Fatal(err)
	}
	bufs := len(c.bufs)
	if c.io.Scratch.Buf == nil {
		t.Fatal("no scratch buffer for variants that split")
	}
	for i, v := range vs {
		if n, err := fas[i].ScratchBytes(c.sh); err != nil || n > c.io.Scratch.Buf.Size() {
			t.Errorf("%v: needs %d bytes of scratch (%v), the shared buffer has %d", v, n, err, c.io.Scratch.Buf.Size())
		}
		cell := Cell{Variant: v.String(), Bound: attnBound}
		if err := sw.run(&cell, 1, c.poison, func(s *vk.Sequence) error { return c.record(s, fas[i], v, &cell) }, c.check); err != nil || !cell.OK() {
			t.Errorf("%v: %v, %+v", v, err, cell)
		}
	}
	if len(c.bufs) != bufs {
		t.Errorf("recording the variants allocated %d buffers", len(c.bufs)-bufs)
	}
}

// TestAttentionWarmUp checks that a table warms the device up on its
// problem before the first cell (the policy) is timed, for at least two
// runs, and says so in the log.
func TestAttentionWarmUp(t *testing.T) {
	d := open(t)
	var log bytes.Buffer
	sw := &sweeper{dev: d, o: Options{Reps: 1, Log: &log}, timed: d.Info().TimestampValid}
	vs := []Attention{{}, {Br: 8, Bc: 16, Splits: 1}, {Br: 8, Bc: 16}}
	tb, err := sw.attentionTable(tiny, "prefill attention", 9, 40, vs)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(log.String()), "\n")
	if len(lines) != 1+len(vs) || !strings.Contains(lines[0], "warm-up") || strings.Contains(lines[0], "warm-up 1 runs") ||
		!strings.Contains(lines[1], "policy") {
		t.Errorf("want a warm-up of 2 runs or more, then the policy's cell, then the others:\n%s", log.String())
	}
	for _, c := range tb.Cells {
		if !c.OK() {
			t.Errorf("%+v", c)
		}
	}
}
