package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
	"github.com/vkinfer/vkinfer/attention"
	"github.com/vkinfer/vkinfer/backend"
	"github.com/vkinfer/vkinfer/bench"
)

// benchCmd measures throughput like llama-bench, with its flags:
// `infer bench -m model.gguf -p 512 -n 128 -d 0,8192 --wave 32,64`.
func benchCmd(args []string) error {
	c := bench.Defaults()
	fs := pflag.NewFlagSet("infer bench", pflag.ContinueOnError)
	var (
		pgs    []string
		waves  []string
		coops  []string
		lo     loadFlags
		output string
		ngl    int
	)
	fs.StringSliceVarP(&c.Models, "model", "m", nil, "GGUF paths or synth:PRESET[:FTYPE] (comma list, repeatable)")
	fs.IntSliceVarP(&c.Prompt, "n-prompt", "p", c.Prompt, "prompt sizes (pp tests)")
	fs.IntSliceVarP(&c.Gen, "n-gen", "n", c.Gen, "generation lengths (tg tests)")
	fs.StringArrayVar(&pgs, "pg", nil, "a prompt then a generation timed together, `pp,tg` (repeatable; also -pg)")
	fs.IntSliceVarP(&c.Depth, "n-depth", "d", c.Depth, "KV-cache depths the tests start at")
	fs.IntSliceVar(&c.UBatch, "ubatch-size", c.UBatch, "prompt tokens per forward program (also -ub)")
	fs.IntVarP(&c.Reps, "repetitions", "r", c.Reps, "timed repetitions of each test")
	fs.IntSliceVar(&c.FlashAttn, "flash-attn", c.FlashAttn, "1: flash attention, 0: the plain attention kernel (also -fa)")
	fs.StringSliceVar(&waves, "wave", []string{"auto"}, "flash attention's lane group and the matrix-vector products' subgroup size: 32, 64 or auto, comma list")
	fs.StringVar(&lo.backend, "backend", "auto", "cpu, vulkan or auto")
	fs.IntVar(&ngl, "n-gpu-layers", 99, "llama-bench's -ngl: 0 runs on the CPU backend; any other value offloads every layer (also -ngl)")
	fs.IntVar(&lo.device, "device", -1, "Vulkan device index from 'infer devices' (-1: best)")
	fs.IntVarP(&c.Threads, "threads", "t", 0, "CPU threads (0: all cores)")
	fs.StringVar(&lo.tune, "tune-profile", "", tuneProfileUsage)
	fs.StringVar(&lo.intDot, "int-dot", "auto", intDotUsage)
	fs.StringVar(&lo.narrowCoop, "narrow-coop", "auto", narrowCoopUsage)
	fs.StringSliceVar(&coops, "coopmat", []string{"auto"}, coopMatUsage+" (a comma list: each is measured, in a column of its own)")
	fs.StringVarP(&output, "output", "o", "md", "output format: "+strings.Join(bench.Formats, ", "))
	fs.BoolVar(&c.Progress, "progress", false, "print each step on stderr")
	if err := fs.Parse(longFlags(args)); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("bench: unexpected argument %q (see infer bench --help)", fs.Arg(0))
	}
	for _, s := range pgs {
		pg, err := parsePG(s)
		if err != nil {
			return err
		}
		c.PG = append(c.PG, pg)
	}
	c.Waves = nil
	for _, s := range waves {
		w, err := attention.ParseWave(s)
		if err != nil {
			return err
		}
		c.Waves = append(c.Waves, w)
	}
	switch {
	case ngl < 0:
		return fmt.Errorf("-ngl %d: want 0 (CPU) or a positive number of layers", ngl)
	case ngl == 0 && lo.backend == "vulkan":
		return fmt.Errorf("-ngl 0 with --backend vulkan: -ngl 0 means the CPU backend")
	case ngl == 0:
		lo.backend = "cpu"
	}
	// openBackend checks --backend too, but only after every model has been
	// opened (and a synth: one generated): a typo should fail at once.
	switch lo.backend {
	case "cpu", "vulkan", "auto":
	default:
		return fmt.Errorf("--backend %q: want cpu, vulkan or auto", lo.backend)
	}
	if lo.backend == "cpu" && (len(c.Waves) != 1 || c.Waves[0] != 0) {
		return fmt.Errorf("--wave: the CPU backend has no wave; it applies to --backend vulkan")
	}
	if _, err := parseOnOffAuto("--narrow-coop", lo.narrowCoop); err != nil {
		return err
	}
	if _, err := parseIntDot(lo.intDot); err != nil {
		return err
	}
	if lo.backend == "cpu" && lo.intDot == "on" {
		return errIntDotCPU
	}
	c.CoopMat = coops
	for _, cm := range coops {
		if _, _, err := parseCoopMat(cm); err != nil {
			return err
		}
		if lo.backend == "cpu" && asksCoopMat(cm) {
			return errCoopMatCPU
		}
	}
	lo.threads = c.Threads
	c.Open = func(in bench.Instance) (backend.Backend, error) {
		l := lo
		l.wave, l.flash, l.coopMat = "auto", in.FlashAttn, in.CoopMat
		if in.Wave != 0 {
			l.wave = strconv.Itoa(in.Wave)
		}
		return l.openBackend()
	}
	c.Log = os.Stderr
	if err := c.Validate(); err != nil {
		return err
	}
	// Generate synth: models up front, with a progress bar, before anything
	// is timed.
	for i, spec := range c.Models {
		var err error
		if c.Models[i], err = resolveModel(spec); err != nil {
			return err
		}
	}
	w, err := bench.NewWriter(os.Stdout, output, c)
	if err != nil {
		return err
	}
	err = bench.Run(c, w.Write)
	// What was measured before a failure is still printed in full.
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	return err
}

// longFlags rewrites llama-bench's multi-letter single-dash flags (-ub, -fa,
// -pg, -ngl), which pflag would read as runs of one-letter flags, to their long
// forms, so llama-bench command lines work unchanged.
func longFlags(args []string) []string {
	long := map[string]string{"-ub": "--ubatch-size", "-fa": "--flash-attn", "-pg": "--pg", "-ngl": "--n-gpu-layers"}
	out := make([]string, len(args))
	for i, a := range args {
		name, value, hasValue := strings.Cut(a, "=")
		if l, ok := long[name]; ok {
			a = l
			if hasValue {
				a += "=" + value
			}
		}
		out[i] = a
	}
	return out
}

// parsePG reads a -pg value, "pp,tg".
func parsePG(s string) (bench.PG, error) {
	pp, tg, ok := strings.Cut(s, ",")
	p, err1 := strconv.Atoi(pp)
	g, err2 := strconv.Atoi(tg)
	if !ok || err1 != nil || err2 != nil {
		return bench.PG{}, fmt.Errorf("-pg %q: want two sizes, pp,tg (e.g. -pg 512,128)", s)
	}
	return bench.PG{Prompt: p, Gen: g}, nil
}
