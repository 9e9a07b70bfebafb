package golden

import (
	"fmt"
	"slices"

	"github.com/vkinfer/vkinfer/backend"
)

// routeTieGap is the gap in router logits below which a token's k-th and
// (k+1)-th experts count as tied: llama.cpp's f16-accumulated prompt
// leaves its KV cache, and so the router inputs of the continuation, off
// by about that much (the tiny qwen3moe's step 2 has a gap of 0.009 and
// picks the other expert in llama.cpp's run).
const routeTieGap = 0.05

// routeProbe wraps a backend so that a copy of every Route's logits is an
// extra output of the program. After each run, tie holds the smallest gap
// between the k-th and (k+1)-th router logits of the batch's last token
// (whose logits the run returns) over every layer.
type routeProbe struct {
	backend.Backend
	tie float64
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

func (o *probeOps) Route(ids, weights, logits backend.Tensor, k int, norm bool) {
	o.Ops.Route(ids, weights, logits, k, norm)
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
	p.probe.tie = 1e30
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
		if o.k < o.cols {
			row := slices.Clone(v[len(v)-o.cols:])
			slices.Sort(row)
			p.probe.tie = min(p.probe.tie, float64(row[o.cols-o.k]-row[o.cols-o.k-1]))
		}
	}
	return nil
}
