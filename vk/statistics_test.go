package vk

import (
	"strings"
	"testing"
)

// TestPipelineStatistics checks Statistics on both kinds of device: where
// the driver reports statistics, at least one named entry comes back, also
// for a pipeline built a second time through the pipeline cache; where it
// does not, the error says so. -v prints what the driver reports.
func TestPipelineStatistics(t *testing.T) {
	d := openTest(t)
	p := saxpy(t, d, 64)
	stats, err := p.Statistics()
	if !d.Info().PipelineStatistics {
		if err == nil || !strings.Contains(err.Error(), "does not report pipeline statistics") {
			t.Fatalf("without the extension: %v, %v; want the error", stats, err)
		}
		t.Logf("%s: no pipeline statistics (%v)", d.Info().Name, err)
		return
	}
	must(t, err)
	if len(stats) == 0 || stats[0].Name == "" {
		t.Fatalf("statistics %v: want at least one named entry", stats)
	}
	for _, s := range stats {
		t.Logf("%q (%s): %s", s.Name, s.Description, s.Value())
	}
	// Another spec compiles a second pipeline, which the cache may serve in
	// part; its statistics must be there too.
	q := saxpy(t, d, 32)
	again, err := q.Statistics()
	must(t, err)
	if len(again) == 0 {
		t.Error("second pipeline: no statistics")
	}
}

// TestPipelineStatisticsFromCache opens the device twice on one cache
// directory, so the second open loads pipelines captured with statistics
// from the saved cache, under validation.
func TestPipelineStatisticsFromCache(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	for run := range 2 {
		d := openTest(t)
		p := saxpy(t, d, 64)
		stats, err := p.Statistics()
		if d.Info().PipelineStatistics && (err != nil || len(stats) == 0) {
			t.Errorf("run %d (cache loaded %v): %v, %v", run, d.cache.loaded, stats, err)
		}
		if run == 1 {
			t.Logf("second open: cache loaded %v, statistics %v", d.cache.loaded, stats)
		}
		d.Close() // saves the cache for the second open
	}
}

func TestStatisticValues(t *testing.T) {
	for _, c := range []struct {
		s    Statistic
		want string
		num  bool
	}{
		{Statistic{Name: "Register Count", Format: StatUint64, Uint: 128}, "Register Count=128", true},
		{Statistic{Name: "Spill", Format: StatInt64, Int: -1}, "Spill=-1", true},
		{Statistic{Name: "Occupancy", Format: StatFloat64, Float: 0.5}, "Occupancy=0.5", true},
		{Statistic{Name: "Uses barrier", Format: StatBool32, Bool: true}, "Uses barrier=true", false},
	} {
		if got := c.s.String(); got != c.want {
			t.Errorf("String() = %q, want %q", got, c.want)
		}
		if _, ok := c.s.Number(); ok != c.num {
			t.Errorf("%s: Number ok = %v, want %v", c.want, ok, c.num)
		}
	}
}
