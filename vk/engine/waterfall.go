package engine

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/vkinfer/vkinfer/vk"
)

// weightRef is what the waterfall knows of an uploaded weight: its name's
// layer and its size in the file.
type weightRef struct {
	layer int   // the N of blk.N., -1 for a weight outside the layers
	bytes int64 // GGUF bytes (the binding rounds them up to whole words)
}

// weightLayer is the layer a tensor name belongs to: N for "blk.N.…", -1
// for the others (token_embd, output_norm, output, rope_freqs).
func weightLayer(name string) int {
	rest, ok := strings.CutPrefix(name, "blk.")
	if !ok {
		return -1
	}
	num, _, ok := strings.Cut(rest, ".")
	if !ok {
		return -1
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// traffic is what one profiled dispatch of a program reads, counted when
// it is recorded from the ranges its op lists (program.op).
type traffic struct {
	// layer is the layer the dispatch belongs to: that of the weights it
	// reads, else of the KV cache it reads or writes, else the layer of
	// the dispatch before it. -1 is before the first layer (the
	// embedding), Layers after the last (output norm and logits).
	layer   int
	weights int64 // bytes of weights
	other   int64 // bytes of activations and other inputs
	// kvRow is the bytes per position of the KV-cache rings it reads (K
	// and V of one layer, attention); the positions read depend on the
	// token's (kvSlots, the ring's size, bounds them).
	kvRow   int64
	kvSlots int
	// counted is false for the second and later dispatches of one op
	// (prefill attention's split-k merge), whose reads are not counted.
	counted bool
}

// count records the traffic of the dispatches p's seq holds from first on,
// all recorded by one op that read reads and wrote writes.
func (p *program) count(first int, reads, writes []vk.Binding) {
	last := p.seq.Profiled()
	if last <= first {
		return
	}
	e := p.e
	t := traffic{layer: p.layer, counted: true}
	named, outside := false, false
	kvLayer := func(b *vk.Buffer) int {
		for l := range e.kc {
			if e.kc[l] == b || e.vc[l] == b {
				return l
			}
		}
		return -1
	}
	for _, b := range reads {
		size := b.Size
		if size == 0 {
			size = b.Buf.Size() - b.Off
		}
		if w, ok := e.weightRefs[vk.Binding{Buf: b.Buf, Off: b.Off}]; ok {
			t.weights += min(size, w.bytes)
			// The first weight names the layer: a product with a folded
			// norm reads the next layer's norm weight after its matrix.
			if w.layer >= 0 && !named {
				t.layer, named = w.layer, true
			} else if w.layer < 0 {
				outside = true
			}
			continue
		}
		if l := kvLayer(b.Buf); l >= 0 {
			slots := e.cache.Slots(l)
			t.kvRow += size / int64(slots)
			t.kvSlots = slots
			if !named {
				t.layer, named = l, true
			}
			continue
		}
		t.other += size
	}
	for _, b := range writes {
		if l := kvLayer(b.Buf); l >= 0 && !named {
			t.layer, named = l, true
		}
	}
	if !named && outside {
		// A weight of no layer: the embedding before the layers, the
		// output norm and logits after them.
		t.layer = -1
		if p.layer >= 0 {
			t.layer = e.cache.Layers
		}
	}
	p.layer = t.layer
	for i := first; i < last; i++ {
		p.traffic = append(p.traffic, t)
		t = traffic{layer: t.layer}
	}
}

// Dispatch is one dispatch of a token's waterfall.
type Dispatch struct {
	Name string // kernel and detail, as the per-op profile names it
	// Layer is the layer it belongs to (see Waterfall.Layers): -1 before
	// the first layer, Layers after the last.
	Layer int
	// Start and End are µs from the start of the token's first dispatch.
	Start, End float64
	// Gap is the idle time before it: from the latest end of the
	// dispatches before it to its start, 0 where it starts before that
	// (it overlaps them).
	Gap float64
	// Busy is the time it adds to the token: from its start or the latest
	// end before it, whichever is later, to its end. The token's span is
	// the sum of every dispatch's Gap and Busy.
	Busy float64
	// Bytes is what it reads: the weights' bytes (Weights) for products,
	// the KV rows up to the token's position for attention, the
	// activations and other inputs for the rest; -1 where it was not
	// counted.
	Bytes, Weights int64
}

// GBps is the dispatch's achieved bandwidth: its bytes over its own
// duration (0 where either is unknown).
func (d Dispatch) GBps() float64 {
	if d.Bytes <= 0 || d.End <= d.Start {
		return 0
	}
	return float64(d.Bytes) / (d.End - d.Start) / 1e3
}

// Waterfall is one decode token's dispatches in submission order.
type Waterfall struct {
	Pos        int // the token's position
	Layers     int
	Dispatches []Dispatch
}

// waterfall lays out the timings ts of one run of n tokens at position pos
// with the traffic tr its dispatches were recorded with; nil where they
// do not match (the profile was switched mid-recording).
func waterfall(ts []vk.OpTime, tr []traffic, pos, n, layers int) *Waterfall {
	if len(ts) == 0 || len(ts) != len(tr) {
		return nil
	}
	w := &Waterfall{Pos: pos, Layers: layers, Dispatches: make([]Dispatch, len(ts))}
	reach := 0.0 // the latest end so far
	for i, t := range ts {
		d := Dispatch{Name: t.Name, Layer: tr[i].layer, Start: t.Start, End: t.Start + t.Micros, Bytes: -1}
		from := max(d.Start, reach)
		if i > 0 {
			d.Gap = max(0, d.Start-reach)
		}
		d.Busy = max(0, d.End-from)
		reach = max(reach, d.End)
		if c := tr[i]; c.counted {
			rows := int64(min(pos+n, c.kvSlots))
			d.Weights = c.weights
			d.Bytes = c.weights + c.other + rows*c.kvRow
		}
		w.Dispatches[i] = d
	}
	return w
}

// Waterfall is the last profiled decode token's waterfall; nil before one
// ran with Options.Profile.
func (e *Engine) Waterfall() *Waterfall { return e.lastToken }

// span sums a run of dispatches: idle and busy µs and bytes read.
type span struct {
	dispatches  int
	idle, busy  float64
	bytes, wgts int64
}

func (s *span) add(d Dispatch) {
	s.dispatches++
	s.idle += d.Gap
	s.busy += d.Busy
	s.bytes += max(d.Bytes, 0)
	s.wgts += d.Weights
}

// tbps is the span's effective bandwidth: bytes over busy plus idle time.
func (s span) tbps() float64 {
	if t := s.idle + s.busy; t > 0 {
		return float64(s.bytes) / t / 1e6
	}
	return 0
}

func (s span) String() string {
	total := s.idle + s.busy
	share := 0.0
	if total > 0 {
		share = 100 * s.idle / total
	}
	return fmt.Sprintf("%3d dispatches, %9.1f µs = busy %9.1f + idle %8.1f (%4.1f%%), read %s (weights %s), %6.3f TB/s",
		s.dispatches, total, s.busy, s.idle, share, mb(s.bytes), mb(s.wgts), s.tbps())
}

func mb(n int64) string { return fmt.Sprintf("%.3f MB", float64(n)/1e6) }

// layerName is how the waterfall names a layer.
func (w *Waterfall) layerName(l int) string {
	switch {
	case l < 0:
		return "in"
	case l >= w.Layers:
		return "out"
	}
	return strconv.Itoa(l)
}

// WriteWaterfall prints w: every dispatch with its start, end, the idle
// gap before it, its duration, the bytes it reads and its bandwidth; a
// summary line after each layer; the token's summary at the end.
func WriteWaterfall(out io.Writer, w *Waterfall) {
	if w == nil {
		fmt.Fprintln(out, "waterfall: no decode token was profiled")
		return
	}
	fmt.Fprintf(out, "waterfall of the decode token at position %d (µs from its first dispatch's start)\n", w.Pos)
	fmt.Fprintf(out, "%4s %5s %10s %10s %8s %8s %12s %8s  %s\n", "#", "layer", "start", "end", "gap", "µs", "bytes", "GB/s", "dispatch")
	var token, layer span
	flush := func(l int) {
		fmt.Fprintf(out, "%10s %-5s %s\n", "layer", w.layerName(l), layer)
		layer = span{}
	}
	for i, d := range w.Dispatches {
		if i > 0 && d.Layer != w.Dispatches[i-1].Layer {
			flush(w.Dispatches[i-1].Layer)
		}
		bytes, rate := "-", "-"
		if d.Bytes >= 0 {
			bytes, rate = strconv.FormatInt(d.Bytes, 10), fmt.Sprintf("%.1f", d.GBps())
		}
		fmt.Fprintf(out, "%4d %5s %10.2f %10.2f %8.2f %8.2f %12s %8s  %s\n", i, w.layerName(d.Layer), d.Start, d.End, d.Gap, d.End-d.Start, bytes, rate, d.Name)
		layer.add(d)
		token.add(d)
	}
	if n := len(w.Dispatches); n > 0 {
		flush(w.Dispatches[n-1].Layer)
	}
	fmt.Fprintf(out, "%10s %-5s %s\n", "token", "", token)
}
