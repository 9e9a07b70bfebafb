package golden

import (
	"fmt"
	"slices"

	"github.com/vkinfer/vkinfer/backend"
	"github.com/vkinfer/vkinfer/gguf"
	"github.com/vkinfer/vkinfer/model"
)

// routeTieGap is the gap in router logits below which a token's k-th and
// (k+1)-th experts count as tied: llama.cpp's f16-accumulated prompt, or
// an engine's f16 KV cache, moves router inputs by about that much (the
// tiny qwen3moe's Q4_K_M step 2 has a gap of 0.009 and picks the other
// expert in llama.cpp's run; its F32 prompt's last token does on the
// Vulkan engine's f16 cache, 0.4 away in its logits).
const routeTieGap = 0.05

// routeProbe wraps a backend so that a copy of every Route's logits is an
// extra output of the program. After each run, ties[i] holds the smallest
// gap between the k-th and (k+1)-th router logits of the batch's token i
// over every layer (1e30 without a router).
type routeProbe struct {
	backend.Backend
	ties []float64
	// routes, when keep is set, are each Route's logits of the last run
	// (one per layer, batch rows × experts) and its k.
	keep   bool
	routes []Routing
}

// Routing is one router's logits over a batch (Tokens × Experts) and the
// number of experts each token uses.
type Routing struct {
	Logits          []float32
	Tokens, Experts int
	K               int
}

// Routes evaluates tokens (from position 0) through the model in f on be
// and returns every layer's router logits: real router distributions, for
// measurements of how a batch spreads over the experts.
func Routes(f *gguf.File, be backend.Backend, tokens []int32) ([]Routing, error) {
	probe := &routeProbe{Backend: be, keep: true}
	m, err := model.Load(f, probe, model.Options{Context: len(tokens), UBatch: len(tokens)})
	if err != nil {
		return nil, err
	}
	defer m.Close()
	if _, err := m.Forward(tokens, 0, false); err != nil {
		return nil, err
	}
	return probe.routes, nil
}

func (r *routeProbe) Record(n int, build func(backend.Ops)) (backend.Program, error) {
	pp := &probeProgram{probe: r}
	p, err := r.Backend.Record(n, func(o backend.Ops) { build(&probeOps{Ops: o, p: pp}) })
	if err != nil {
		return nil, err
	}
	pp.Program = p
	return pp, nil
}

// probeOps records Route's logits as they are at the Route (the model
// reuses one tensor for every layer's logits, so it copies them first).
type probeOps struct {
	backend.Ops
	p *probeProgram
}

func (o *probeOps) Route(ids, weights, logits, w, x backend.Tensor, k int, norm bool) {
	o.Ops.Route(ids, weights, logits, w, x, k, norm)
	snap := o.Ops.Tensor(logits.Rows(), logits.Cols())
	o.Ops.CopyRows(snap, logits, 0)
	o.Ops.Output(snap)
	o.p.outs = append(o.p.outs, probeOut{size: logits.Rows() * logits.Cols(), cols: logits.Cols(), k: k})
}

func (o *probeOps) Output(t backend.Tensor) {
	o.Ops.Output(t)
	o.p.outs = append(o.p.outs, probeOut{size: t.Rows() * t.Cols()})
}

// probeOut is one output of a probed program, in call order: the model's
// own (k == 0) or a Route's logits.
type probeOut struct{ size, cols, k int }

type probeProgram struct {
	backend.Program
	probe *routeProbe
	outs  []probeOut
	all   []float32
}

func (p *probeProgram) Run(tokens []int32, pos int, out []float32) error {
	total := 0
	for _, o := range p.outs {
		total += o.size
	}
	if cap(p.all) < total {
		p.all = make([]float32, total)
	}
	all := p.all[:total]
	if err := p.Program.Run(tokens, pos, all); err != nil {
		return err
	}
	ties := p.probe.ties[:0]
	for range tokens {
		ties = append(ties, 1e30)
	}
	p.probe.ties = ties
	p.probe.routes = p.probe.routes[:0]
	off, dst := 0, 0
	for _, o := range p.outs {
		v := all[off : off+o.size]
		off += o.size
		if o.k == 0 {
			if dst+len(v) > len(out) {
				return fmt.Errorf("golden: output buffer of %d values, the program produces more", len(out))
			}
			dst += copy(out[dst:], v)
			continue
		}
		if p.probe.keep {
			p.probe.routes = append(p.probe.routes, Routing{Logits: slices.Clone(v), Tokens: len(tokens), Experts: o.cols, K: o.k})
		}
		for i := range ties {
			if o.k < o.cols {
				row := slices.Clone(v[i*o.cols : (i+1)*o.cols])
				slices.Sort(row)
				ties[i] = min(ties[i], float64(row[o.cols-o.k]-row[o.cols-o.k-1]))
			}
		}
	}
	return nil
}
