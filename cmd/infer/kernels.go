package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/vkinfer/vkinfer/attention"
	"github.com/vkinfer/vkinfer/gguf"
	"github.com/vkinfer/vkinfer/model"
	"github.com/vkinfer/vkinfer/model/synth"
	"github.com/vkinfer/vkinfer/vk"
	"github.com/vkinfer/vkinfer/vk/engine"
	"github.com/vkinfer/vkinfer/vk/flashattn"
)

// kernelsFormats are the output formats of infer kernels.
var kernelsFormats = []string{"table", "json"}

// kernelReport is one pipeline of `infer kernels`, an entry of its JSON
// list.
type kernelReport struct {
	Name   string `json:"name"`   // kind and op
	Kind   string `json:"kind"`   // decode, rows or prefill (engine.Pipeline.Kind)
	Shader string `json:"shader"` // the shader's name
	Op     string `json:"op"`     // what it computes: shape and type, or attention plan
	// Wave is flash attention's lane group (absent for other kernels).
	Wave      int      `json:"wave,omitempty"`
	Constants []uint32 `json:"spec_constants"`
	Workgroup int      `json:"workgroup_size,omitempty"` // invocations, as specialized
	// RequestedSubgroup is the required subgroup size (0: the driver's
	// choice); Subgroup the size the driver compiled for (0: not
	// reported).
	RequestedSubgroup int            `json:"requested_subgroup_size"`
	Subgroup          int            `json:"subgroup_size"`
	Stats             map[string]any `json:"stats,omitempty"` // the driver's statistics by its names
	Error             string         `json:"error,omitempty"` // why the pipeline did not build
}

// kernelsCmd lists every pipeline the engine builds for a model's decode
// and prefill passes on one device (with --seqs N, also the passes that
// decode 2 to N sequences together, as infer serve --parallel N does),
// builds them and prints what the driver's compiler reports: `infer
// kernels -m MODEL [--device N] [--wave 32,64] [--seqs N] [-o table|json]`. Only the model's shapes are read (a
// synth: preset's without generating it); nothing is allocated or run, so
// it works on devices that cannot run anything, such as RADV's null
// devices (RADV_FORCE_FAMILY).
func kernelsCmd(args []string) error {
	fs := pflag.NewFlagSet("infer kernels", pflag.ContinueOnError)
	var (
		spec, output, intDotFlag, tuneFlag, coopFlag, narrowFlag string
		device, ctx, ubatch, seqs                                int
		waves                                                    []string
		flash                                                    bool
	)
	fs.StringVarP(&spec, "model", "m", "", "GGUF path or synth:PRESET[:FTYPE] (only its shapes are read)")
	fs.IntVar(&device, "device", -1, "Vulkan device index, as listed by infer devices (-1: best)")
	fs.StringSliceVar(&waves, "wave", nil, "flash attention's lane groups and the matrix-vector products' subgroup sizes: 32, 64 or auto, comma list (default: every lane group the device can run)")
	fs.StringVar(&intDotFlag, "int-dot", "auto", intDotUsage)
	fs.StringVar(&coopFlag, "coopmat", "auto", coopMatUsage)
	fs.StringVar(&narrowFlag, "narrow-coop", "auto", narrowCoopUsage)
	fs.BoolVarP(&flash, "flash-attn", "a", true, "flash attention (false: the plain attention kernel)")
	fs.StringVar(&tuneFlag, "tune-profile", "", tuneProfileUsage)
	fs.IntVarP(&ctx, "ctx-size", "c", 0, "context size (0: the model's, at most 4096); decode's split-k depends on it")
	fs.IntVarP(&ubatch, "ubatch-size", "u", 512, "prompt tokens per forward pass: the prefill batch")
	fs.IntVar(&seqs, "seqs", 1, "sequences decoded together, as infer serve --parallel N: lists the passes of 2 to N sequences (their kernels' row modes) too")
	fs.StringVarP(&output, "output", "o", "table", "output format: "+strings.Join(kernelsFormats, ", "))
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("kernels: unexpected argument %q (see infer kernels --help)", fs.Arg(0))
	case spec == "":
		return fmt.Errorf("kernels: no model given: use -m model.gguf or -m synth:PRESET")
	case !slices.Contains(kernelsFormats, output):
		return fmt.Errorf("-o %q: want one of %s", output, strings.Join(kernelsFormats, ", "))
	case ctx < 0 || ubatch < 1:
		return fmt.Errorf("kernels: context %d and ubatch %d: want a context of 0 or more and a ubatch of 1 or more", ctx, ubatch)
	case seqs < 1:
		return fmt.Errorf("kernels: --seqs %d: want 1 or more", seqs)
	}
	var requested []int
	for _, w := range waves {
		n, err := attention.ParseWave(w)
		if err != nil {
			return err
		}
		requested = append(requested, n)
	}
	intDot, err := parseIntDot(intDotFlag)
	if err != nil {
		return err
	}
	coopMat, coopInt8, err := parseCoopMat(coopFlag)
	if err != nil {
		return err
	}
	narrowCoop, err := parseOnOffAuto("--narrow-coop", narrowFlag)
	if err != nil {
		return err
	}
	f, err := modelHeader(spec)
	if err != nil {
		return err
	}
	defer f.Close()
	// CPU drivers too: lavapipe's pipelines are what CI runs.
	dev, err := vk.Open(vk.Options{Device: device, AllowCPU: true})
	if err != nil {
		return err
	}
	defer dev.Close()
	info := dev.Info()
	tuning, err := tuningFor(tuneFlag, info, os.Stderr)
	if err != nil {
		return err
	}
	if len(requested) == 0 {
		for _, c := range attention.SupportedWaves(flashattn.Device(info)) {
			requested = append(requested, c.W)
		}
	}
	if !flash {
		requested = []int{0} // the plain kernel has no lane groups
	}
	t0 := time.Now()
	var list []engine.Pipeline
	for _, w := range requested {
		o := engine.Options{Wave: w, PlainAttention: !flash, IntDot: intDot, CoopMat: coopMat, CoopInt8: coopInt8,
			NarrowCoop: narrowCoop, Tune: tuning, Warn: os.Stderr}
		ps, err := planKernels(dev, o, f, ctx, ubatch, seqs)
		if err != nil {
			return err
		}
		list = append(list, ps...)
	}
	var reports []kernelReport
	vk.WithoutGC(func() { reports = buildKernels(dev, list) })
	fmt.Fprintf(os.Stderr, "kernels: %d pipelines of %s on %s (%s) built in %.1f s\n",
		len(reports), f.Path(), info.Name, info.Driver, time.Since(t0).Seconds())
	if output == "json" {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(reports)
	} else {
		err = writeKernelTable(os.Stdout, reports)
	}
	if err != nil {
		return err
	}
	failed := 0
	for _, r := range reports {
		if r.Error != "" {
			failed++
		}
	}
	if failed > 0 {
		return fmt.Errorf("kernels: %d of %d pipelines did not build", failed, len(reports))
	}
	return nil
}

// modelHeader opens a model's header: a file's (its tensor bytes stay
// unread), or a synth: preset's without generating the file.
func modelHeader(spec string) (*gguf.File, error) {
	if synth.IsSpec(spec) {
		return synth.Header(spec)
	}
	return gguf.Open(spec)
}

// planKernels lists the pipelines an engine with options o builds on dev
// for the model of header f: its decode pass (one token), its prefill
// pass (a full ubatch, as far as the context allows), and the passes that
// decode 2 to seqs sequences together (a server steps however many of its
// slots are decoding).
func planKernels(dev *vk.Device, o engine.Options, f *gguf.File, ctx, ubatch, seqs int) ([]engine.Pipeline, error) {
	e, err := engine.New(dev, o)
	if err != nil {
		return nil, err
	}
	defer e.Close()
	plan := e.Plan()
	m, err := model.Load(f, plan, model.Options{Context: ctx, UBatch: ubatch, Seqs: seqs})
	if err != nil {
		return nil, err
	}
	defer m.Close()
	if err := m.Prepare(1, false); err != nil {
		return nil, err
	}
	if err := m.Prepare(min(m.UBatch, m.Context), false); err != nil {
		return nil, err
	}
	for n := 2; n <= seqs; n++ {
		if err := m.PrepareRows(n); err != nil {
			return nil, err
		}
	}
	return plan.Pipelines(), nil
}

// buildKernels builds each pipeline once (several waves list the same
// kernels) and reads what the driver reports about it, decode's first,
// then the several sequences' (rows), then prefill's.
func buildKernels(dev *vk.Device, list []engine.Pipeline) []kernelReport {
	var out []kernelReport
	seen := map[string]bool{}
	for _, p := range list {
		s := p.Spec
		key := fmt.Sprintf("%s|%s|%s|%v|%d", p.Kind, p.Op, s.Name, s.Spec, s.SubgroupSize)
		if seen[key] {
			continue
		}
		seen[key] = true
		r := kernelReport{Name: p.Kind + " " + p.Op, Kind: p.Kind, Shader: s.Name, Op: p.Op, Wave: p.Wave,
			Constants: s.Spec, RequestedSubgroup: s.SubgroupSize}
		pipe, err := dev.Pipeline(s)
		if err != nil {
			r.Error = err.Error()
			out = append(out, r)
			continue
		}
		l := pipe.LocalSize()
		r.Workgroup = int(l[0] * l[1] * l[2])
		// Devices without pipeline statistics report neither; the entry
		// then only says that the pipeline built.
		if sg, err := pipe.DriverSubgroupSize(); err == nil {
			r.Subgroup = sg
		}
		if stats, err := pipe.Statistics(); err == nil {
			r.Stats = map[string]any{}
			for _, st := range stats {
				r.Stats[st.Name] = statValue(st)
			}
		}
		out = append(out, r)
	}
	slices.SortStableFunc(out, func(a, b kernelReport) int { return cmp.Compare(kindOrder(a.Kind), kindOrder(b.Kind)) })
	return out
}

func kindOrder(kind string) int {
	return slices.Index([]string{"decode", "rows", "prefill"}, kind)
}

// statValue is a statistic's value as JSON should carry it.
func statValue(s vk.Statistic) any {
	switch s.Format {
	case vk.StatBool32:
		return s.Bool
	case vk.StatInt64:
		return s.Int
	case vk.StatUint64:
		return s.Uint
	}
	return s.Float
}

// tableStats are the statistics the table shows, where the driver reports
// them (the JSON has all): RADV's registers, spills, shared memory (LDS),
// scratch and occupancy; NVIDIA's registers and memory.
var tableStats = []string{
	"VGPRs", "SGPRs", "Spilled VGPRs", "Spilled SGPRs", "LDS size", "Scratch size", "Subgroups per SIMD",
	"Register Count", "Shared Memory Size", "Stack Size",
}

// writeKernelTable prints the reports as a markdown table, columns padded
// as llama-bench pads them.
func writeKernelTable(w io.Writer, reports []kernelReport) error {
	header := []string{"kind", "pipeline", "lanes", "sg req", "sg"}
	var stats []string
	for _, name := range tableStats {
		if slices.ContainsFunc(reports, func(r kernelReport) bool { _, ok := r.Stats[name]; return ok }) {
			stats = append(stats, name)
		}
	}
	header = append(append(header, stats...), "error")
	rows := [][]string{header}
	for _, r := range reports {
		row := []string{r.Kind, r.Op, number(r.Workgroup), number(r.RequestedSubgroup), number(r.Subgroup)}
		for _, name := range stats {
			v, ok := r.Stats[name]
			cell := "-"
			if ok {
				cell = fmt.Sprint(v)
			}
			row = append(row, cell)
		}
		rows = append(rows, append(row, r.Error))
	}
	width := make([]int, len(header))
	for _, row := range rows {
		for i, c := range row {
			width[i] = max(width[i], len([]rune(c)))
		}
	}
	var b strings.Builder
	for i, row := range rows {
		b.WriteString("|")
		for j, c := range row {
			// Text left, numbers right, as llama-bench aligns them.
			if j < 2 || j == len(row)-1 {
				fmt.Fprintf(&b, " %-*s |", width[j], c)
			} else {
				fmt.Fprintf(&b, " %*s |", width[j], c)
			}
		}
		b.WriteString("\n")
		if i == 0 {
			b.WriteString("|")
			for j := range row {
				dash := strings.Repeat("-", width[j]+1)
				if j < 2 || j == len(row)-1 {
					fmt.Fprintf(&b, " %s|", dash)
				} else {
					fmt.Fprintf(&b, "%s:|", dash)
				}
			}
			b.WriteString("\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// number renders a count, "-" for 0 (none required, or not reported).
func number(n int) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprint(n)
}
