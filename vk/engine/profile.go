package engine

import (
	"fmt"
	"io"
	"sort"

	"github.com/vkinfer/vkinfer/vk"
)

// OpStat is the GPU time one kind of dispatch took over the profiled runs.
type OpStat struct {
	Op     string
	Calls  int
	Micros float64
}

// account adds one run's dispatch timings, keyed by kernel and batch kind
// (decode runs one token, prefill more), since the two have different
// bottlenecks and mixing them would hide both.
func (e *Engine) account(n int, ts []vk.OpTime) {
	kind := "decode"
	if n > 1 {
		kind = "prefill"
	}
	for _, t := range ts {
		key := kind + " " + t.Name
		s := e.prof[key]
		if s == nil {
			s = &OpStat{Op: key}
			e.prof[key] = s
		}
		s.Calls++
		s.Micros += t.Micros
	}
}

// Profile returns the per-op GPU times so far, largest first.
func (e *Engine) Profile() []OpStat {
	var out []OpStat
	for _, s := range e.prof {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Micros > out[j].Micros })
	return out
}

// WriteProfile prints the per-op table: op, calls, total µs, µs per call
// and share of the GPU time of its batch kind.
func WriteProfile(w io.Writer, stats []OpStat) {
	total := map[string]float64{}
	for _, s := range stats {
		total[kindOf(s.Op)] += s.Micros
	}
	fmt.Fprintf(w, "%-28s %8s %14s %12s %7s\n", "op", "calls", "total µs", "µs/call", "share")
	for _, s := range stats {
		fmt.Fprintf(w, "%-28s %8d %14.1f %12.2f %6.1f%%\n", s.Op, s.Calls, s.Micros, s.Micros/float64(s.Calls), 100*s.Micros/total[kindOf(s.Op)])
	}
}

func kindOf(op string) string {
	for i := range op {
		if op[i] == ' ' {
			return op[:i]
		}
	}
	return op
}
