package flashattn

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/vkinfer/vkinfer/attention"
	"github.com/vkinfer/vkinfer/vk"
	"github.com/vkinfer/vkinfer/vk/kernels"
)

// TestStatisticsMatchesRecord checks that Statistics asks for the very
// pipeline Record dispatches: after Statistics, Record must build nothing
// but prefill's reduce pass. mainPipeline repeats Record's specialization
// constants, and this catches the two drifting apart.
func TestStatisticsMatchesRecord(t *testing.T) {
	d := setup(t)
	for _, c := range []struct {
		queries, br, splits int
		q8                  bool
	}{
		{1, 1, 0, false}, {1, 1, 8, false}, {1, 1, 8, true}, {3, 8, 1, false}, {3, 8, 4, true},
	} {
		t.Run(fmt.Sprintf("q%d/br%d/splits%d/q8=%v", c.queries, c.br, c.splits, c.q8), func(t *testing.T) {
			fa, err := New(d, Options{Wave: 32, Prefs: attention.Prefs{Br: c.br, Splits: c.splits}})
			if err != nil {
				t.Fatal(err)
			}
			defer fa.Close()
			sh := Shape{Queries: c.queries, Heads: 8, KVHeads: 2, HeadDim: 128, Context: 300, Scale: float32(1 / math.Sqrt(128))}
			stats, err := fa.Statistics(sh, c.q8)
			if d.Info().PipelineStatistics {
				if err != nil || len(stats) == 0 {
					t.Fatalf("statistics: %v, %v", stats, err)
				}
			} else if err == nil || !strings.Contains(err.Error(), "does not report pipeline statistics") {
				t.Fatalf("without the extension: %v, %v; want the error", stats, err)
			}
			before := map[pipeKey]bool{}
			for k := range fa.pipes {
				before[k] = true
			}
			if len(before) != 1 {
				t.Fatalf("Statistics built %d pipelines, want 1", len(before))
			}
			s := d.NewSequence()
			defer s.Free()
			if err := fa.Record(s, statsIO(t, d, fa, sh, c.q8), sh); err != nil {
				t.Fatal(err)
			}
			for k := range fa.pipes {
				if !before[k] && k.name != "flash_attn_reduce" {
					t.Errorf("Record built %s %v, which Statistics did not ask for (it has %v)", k.name, k.spec, before)
				}
			}
		})
	}
}

// statsIO allocates Record's buffers for sh; their contents do not matter,
// since nothing runs.
func statsIO(t *testing.T, d *vk.Device, fa *FlashAttn, sh Shape, q8 bool) IO {
	t.Helper()
	alloc := func(n int64) vk.Binding {
		b, err := d.NewBuffer(max(n, 4), false)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Free)
		return vk.Binding{Buf: b}
	}
	q := 4 * int64(sh.Queries*sh.Heads*sh.HeadDim)
	cache := 2 * int64(sh.Context*sh.KVHeads*sh.HeadDim)
	scratch, err := fa.ScratchBytes(sh)
	if err != nil {
		t.Fatal(err)
	}
	io := IO{Q: alloc(q), K: alloc(cache), V: alloc(cache), Out: alloc(q), Step: alloc(4)}
	if scratch > 0 {
		io.Scratch = alloc(scratch)
	}
	if q8 {
		io.Q8 = alloc(kernels.Q8Bytes(sh.Queries, sh.Heads*sh.HeadDim))
	}
	return io
}
