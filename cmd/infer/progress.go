package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"

	"github.com/vkinfer/vkinfer/model/synth"
)

// progress draws a one-line bar on stderr for long work. Small jobs (under
// 64 MiB) draw nothing, so quick runs stay quiet.
type progress struct {
	w     io.Writer
	label string
	on    bool
	last  time.Time
	drawn bool
}

func newProgress(w io.Writer, label string, total int64) *progress {
	return &progress{w: w, label: label, on: total >= 64<<20}
}

// update redraws the bar at most ten times a second.
func (p *progress) update(done, total uint64) {
	if !p.on || total == 0 || (time.Since(p.last) < 100*time.Millisecond && done < total) {
		return
	}
	p.last = time.Now()
	const width = 30
	frac := float64(done) / float64(total)
	fill := int(frac * width)
	fmt.Fprintf(p.w, "\r%s [%s%s] %3.0f%% %s / %s", p.label, strings.Repeat("=", fill), strings.Repeat(" ", width-fill),
		100*frac, humanBytes(done), humanBytes(total))
	p.drawn = true
}

// done ends the bar's line.
func (p *progress) done() {
	if p.drawn {
		fmt.Fprintln(p.w)
	}
}

// resolveModel maps a -m value to a file: a synth:PRESET[:FTYPE] model is
// generated on first use (a 5 GB preset takes a while) with a progress bar,
// then reused from the cache; anything else is a path.
func resolveModel(spec string) (string, error) {
	bar := newProgress(os.Stderr, "generating "+spec, math.MaxInt64)
	defer bar.done()
	return synth.Resolve(spec, bar.update)
}
