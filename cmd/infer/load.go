package main

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/vkinfer/vkinfer/attention"
	"github.com/vkinfer/vkinfer/backend"
	"github.com/vkinfer/vkinfer/backend/cpu"
	"github.com/vkinfer/vkinfer/gguf"
	"github.com/vkinfer/vkinfer/model"
	"github.com/vkinfer/vkinfer/vk"
	"github.com/vkinfer/vkinfer/vk/engine"
)

// loadFlags are the model and backend flags shared by run, chat and bench.
type loadFlags struct {
	model      string
	ctx        int
	threads    int
	ubatch     int
	backend    string
	device     int
	verbose    bool
	profile    string // --profile: "" (off), ops or waterfall
	wave       string
	intDot     string // --int-dot
	coopMat    string // --coopmat
	narrowCoop string // --narrow-coop
	flash      bool
	tune       string // --tune-profile
	// seqs is how many sequences the KV cache should hold (infer serve's
	// --parallel) where the backend can decode several together; 0 or 1:
	// one.
	seqs int
	// backendName is the backend load chose, for messages.
	backendName string

	// file is the GGUF load opened (for what the model does not keep, such
	// as the chat template); open until load's closeAll.
	file *gguf.File
}

func (l *loadFlags) register(fs *pflag.FlagSet) {
	fs.StringVarP(&l.model, "model", "m", "", "GGUF model path")
	fs.IntVarP(&l.ctx, "ctx-size", "c", 0, "context size (0: the model's, at most 4096)")
	fs.IntVarP(&l.threads, "threads", "t", 0, "CPU threads (0: all cores)")
	fs.IntVarP(&l.ubatch, "ubatch-size", "u", 512, "prompt tokens per forward pass")
	fs.StringVar(&l.backend, "backend", "auto", "cpu, vulkan or auto")
	fs.IntVar(&l.device, "device", -1, "Vulkan device index, as listed by infer devices (-1: best)")
	fs.BoolVar(&l.verbose, "verbose", false, "print details of the model and device")
	fs.StringVar(&l.wave, "wave", "auto", waveUsage)
	fs.StringVar(&l.intDot, "int-dot", "auto", intDotUsage)
	fs.StringVar(&l.coopMat, "coopmat", "auto", coopMatUsage)
	fs.StringVar(&l.narrowCoop, "narrow-coop", "auto", narrowCoopUsage)
	fs.BoolVarP(&l.flash, "flash-attn", "a", true, "use flash attention (false: the plain attention kernel)")
	fs.StringVar(&l.tune, "tune-profile", "", tuneProfileUsage)
	fs.StringVar(&l.profile, "profile", "", profileUsage)
	fs.Lookup("profile").NoOptDefVal = "ops"
}

const narrowCoopUsage = "the products of 9 to 64 columns (sequences decoding together, short prompts) on matvec_coopmat, " +
	"where cooperative matrices are on: on, off or auto (on for NVIDIA, the only vendor measured)"

const waveUsage = "flash attention's lane group and the subgroup size of the matrix-vector products: 32, 64 or auto " +
	"(attention: RDNA 32, GCN 64, others native; products: RDNA 64, others the driver's)"

const profileUsage = "time every GPU dispatch and print at the end a per-op table (--profile), " +
	"or the table and the waterfall of the last decode token: every dispatch's start, end, idle gap, bytes read and GB/s (--profile=waterfall)"

// profiling reads --profile: whether to time dispatches, and whether to
// print the waterfall as well as the per-op table.
func (l *loadFlags) profiling() (on, waterfall bool, err error) {
	switch l.profile {
	case "", "off":
		return false, false, nil
	case "ops":
		return true, false, nil
	case "waterfall":
		return true, true, nil
	}
	return false, false, fmt.Errorf("--profile %q: want ops or waterfall (--profile alone is ops)", l.profile)
}

// load opens the model, picks the backend and places the weights, printing a
// summary and a progress bar on stderr.
func (l *loadFlags) load() (m *model.Model, closeAll func(), took time.Duration, err error) {
	t0 := time.Now()
	if l.model == "" {
		return nil, nil, 0, fmt.Errorf("no model given: use -m model.gguf")
	}
	profile, waterfall, err := l.profiling()
	if err != nil {
		return nil, nil, 0, err
	}
	// synth:PRESET[:FTYPE] is generated once into the cache and reused;
	// anything else is a path.
	path, err := resolveModel(l.model)
	if err != nil {
		return nil, nil, 0, err
	}
	f, err := gguf.Open(path)
	if err != nil {
		return nil, nil, 0, err
	}
	be, err := l.openBackend()
	if err != nil {
		f.Close()
		return nil, nil, 0, err
	}
	l.backendName = be.Name()
	seqs := 1
	if _, ok := be.(backend.MultiSeq); ok {
		seqs = max(1, l.seqs)
	}
	bar := newProgress(os.Stderr, "loading", f.Size())
	m, err = model.Load(f, be, model.Options{Context: l.ctx, UBatch: l.ubatch, Seqs: seqs, Progress: bar.update})
	bar.done()
	if err != nil {
		be.Close()
		f.Close()
		return nil, nil, 0, err
	}
	printSummary(f, m, be)
	l.file = f
	closeAll = func() {
		// A run that failed before any dispatch (a prompt past the
		// context, say) has nothing to show: its error stands alone.
		if e, ok := be.(*engine.Engine); ok && profile {
			if stats := e.Profile(); len(stats) > 0 {
				engine.WriteProfile(os.Stderr, stats)
				if waterfall {
					engine.WriteWaterfall(os.Stderr, e.Waterfall())
				}
			}
		}
		m.Close()
		f.Close()
	}
	return m, closeAll, time.Since(t0), nil
}

// openBackend picks the backend: auto takes a Vulkan GPU when one exists
// (CPU drivers such as lavapipe only when asked for by --backend vulkan) and
// falls back to the CPU backend, saying why.
func (l *loadFlags) openBackend() (backend.Backend, error) {
	switch l.backend {
	case "cpu":
		if l.intDot == "on" {
			return nil, errIntDotCPU
		}
		if asksCoopMat(l.coopMat) {
			return nil, errCoopMatCPU
		}
		return cpu.New(l.threads), nil
	case "vulkan", "auto":
		wave, err := attention.ParseWave(l.wave)
		if err != nil {
			return nil, err
		}
		profile, _, err := l.profiling()
		if err != nil {
			return nil, err
		}
		intDot, err := parseIntDot(l.intDot)
		if err != nil {
			return nil, err
		}
		coopMat, coopInt8, err := parseCoopMat(l.coopMat)
		if err != nil {
			return nil, err
		}
		narrowCoop, err := parseOnOffAuto("--narrow-coop", l.narrowCoop)
		if err != nil {
			return nil, err
		}
		dev, err := vk.Open(vk.Options{Device: l.device, AllowCPU: l.backend == "vulkan"})
		if err == nil {
			// A device that cannot run work (a driver's null device) is
			// no backend, whether asked for or found.
			if err = dev.CanRun(); err != nil {
				dev.Close()
			}
		}
		if err == nil && l.backend == "auto" && l.device < 0 && dev.Info().Type == "cpu" {
			// The only Vulkan device is a CPU driver (lavapipe): our own CPU
			// backend is faster than emulating a GPU on the same cores.
			err = fmt.Errorf("the only Vulkan device, %s, is a CPU driver (--backend vulkan runs on it anyway)", dev.Info().Name)
			dev.Close()
			// Asked-for GPU paths are not quietly dropped with the GPU.
			switch {
			case l.intDot == "on":
				return nil, fmt.Errorf("%w; %v", errIntDotCPU, err)
			case asksCoopMat(l.coopMat):
				return nil, fmt.Errorf("%w; %v", errCoopMatCPU, err)
			}
			fmt.Fprintf(os.Stderr, "backend: %v; using the CPU backend\n", err)
			return cpu.New(l.threads), nil
		}
		if err == nil {
			var e *engine.Engine
			o := engine.Options{OwnDevice: true, Profile: profile, Wave: wave, PlainAttention: !l.flash, IntDot: intDot,
				CoopMat: coopMat, CoopInt8: coopInt8, NarrowCoop: narrowCoop, Warn: os.Stderr}
			if o.Tune, err = tuningFor(l.tune, dev.Info(), os.Stderr); err != nil {
				dev.Close()
				return nil, err
			}
			if e, err = engine.New(dev, o); err == nil {
				if l.verbose {
					w, sg := e.Wave()
					fmt.Fprint(os.Stderr, dev.Info().ReportVerbose())
					fmt.Fprintf(os.Stderr, "flash attention: wave%d on hardware subgroups of %d\n", w, sg)
					fmt.Fprintf(os.Stderr, "matrix-vector products: %s\n", describeMatVecWave(e))
					fmt.Fprintf(os.Stderr, "matrix products: %s\n", describeProducts(e))
					fmt.Fprintln(os.Stderr, describeTuning(o.Tune))
				}
				return e, nil
			}
			dev.Close()
			// A wave, integer dot products or cooperative matrices the
			// device cannot run are the user's choice, not a missing GPU:
			// never fall back over them.
			if wave != 0 || (intDot != nil && *intDot) || (coopMat != nil && *coopMat) {
				return nil, err
			}
		}
		if l.backend == "vulkan" {
			return nil, err
		}
		fmt.Fprintf(os.Stderr, "backend: no usable Vulkan GPU (%v); using the CPU\n", err)
		return cpu.New(l.threads), nil
	default:
		return nil, fmt.Errorf("--backend %q: want cpu, vulkan or auto", l.backend)
	}
}

// printSummary prints the model line llama.cpp users expect: architecture,
// parameters, the mix of tensor types, context and backend.
func printSummary(f *gguf.File, m *model.Model, be backend.Backend) {
	var params uint64
	count := map[string]int{}
	for _, t := range f.Tensors() {
		params += t.Elements()
		count[t.Type.String()]++
	}
	var mix []string
	for k, n := range count {
		mix = append(mix, fmt.Sprintf("%s ×%d", k, n))
	}
	sort.Strings(mix)
	hp := m.HP
	fmt.Fprintf(os.Stderr, "model: %s | %s | %s params | %s | %s\n", f.Path(), hp.Arch, humanCount(params), strings.Join(mix, ", "), humanBytes(uint64(f.Size())))
	fmt.Fprintf(os.Stderr, "model: n_embd %d, n_layer %d, n_head %d, n_head_kv %d, n_ff %d, n_vocab %d, ctx %d (trained %d)\n",
		hp.Embd, hp.Layers, hp.Heads, hp.KVHeads, hp.FF, hp.Vocab, m.Context, hp.Context)
	if c := m.Cache; c.TotalSlots() < c.Layers*c.Context {
		local := 0
		for l := range c.Layers {
			if c.Window(l) > 0 {
				local++
			}
		}
		fmt.Fprintf(os.Stderr, "model: sliding-window attention on %d of %d layers; their KV rings keep the cache at %d of %d positions\n",
			local, c.Layers, c.TotalSlots(), c.Layers*c.Context)
	}
	fmt.Fprintf(os.Stderr, "backend: %s\n", be.Name())
}

func humanCount(n uint64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2f B", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.2f M", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.2f K", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}

func humanBytes(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.2f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

const intDotUsage = "matrix products on 8-bit activations and integer dot products: on, off or auto (on where the device runs them natively)"

var errIntDotCPU = fmt.Errorf("--int-dot on: the CPU backend computes in f32; it applies to --backend vulkan")

// parseIntDot reads --int-dot: nil for auto.
func parseIntDot(s string) (*bool, error) { return parseOnOffAuto("--int-dot", s) }

// parseOnOffAuto reads an on|off|auto flag: nil for auto.
func parseOnOffAuto(flag, s string) (*bool, error) {
	switch s {
	case "auto":
		return nil, nil
	case "on", "off":
		on := s == "on"
		return &on, nil
	}
	return nil, fmt.Errorf("%s %q: want on, off or auto", flag, s)
}

func describeIntDot(on bool) string {
	if on {
		return "8-bit activations, integer dot products"
	}
	return "f32 activations"
}

const coopMatUsage = "prefill matrix products on the matrix cores (VK_KHR_cooperative_matrix): on, off, auto (on where the policy finds usable fragment shapes; see infer devices --verbose) or int8 (on, with 8-bit activations and int8 fragments for the quantized weights: the integer variant, unmeasured, off by default)"

var errCoopMatCPU = fmt.Errorf("--coopmat on: the CPU backend has no cooperative matrices; it applies to --backend vulkan")

// parseCoopMat reads --coopmat: nil for auto; int8 is on, with the
// integer variant (engine.Options.CoopInt8).
func parseCoopMat(s string) (on *bool, int8 bool, err error) {
	if s == "int8" {
		t := true
		return &t, true, nil
	}
	if on, err = parseOnOffAuto("--coopmat", s); err != nil {
		return nil, false, fmt.Errorf("--coopmat %q: want on, off, auto or int8", s)
	}
	return on, false, nil
}

// asksCoopMat says whether --coopmat s insists on cooperative matrices.
func asksCoopMat(s string) bool { return s == "on" || s == "int8" }

// describeProducts says what the engine's matrix products run on: the
// activations they take and, in prefill, cooperative matrices (which shape,
// at which subgroup size, whether narrow batches take them) or the scalar
// kernels and why.
func describeProducts(e *engine.Engine) string {
	s := describeIntDot(e.IntDot())
	c := e.CoopMat()
	narrow := ""
	if e.NarrowCoop() {
		narrow = "; batches of 9 to 64 sequences on them too (matvec_coopmat)"
	}
	switch {
	case c.On() && e.CoopInt8():
		return fmt.Sprintf("%s; prefill on cooperative matrices: %s, quantized weights on 8-bit activations and int8 fragments%s", s, c, narrow)
	case c.On():
		return fmt.Sprintf("%s; prefill on cooperative matrices: %s%s", s, c, narrow)
	case c.Reason != "":
		return fmt.Sprintf("%s; no cooperative matrices: %s %s", s, e.Device().Info().Name, c.Reason)
	}
	return s + "; no cooperative matrices"
}

// describeMatVecWave says which subgroup size the matrix-vector products
// require (attention.MatVecWave), or that the driver chooses.
func describeMatVecWave(e *engine.Engine) string {
	f32, q8 := e.MatVecWave()
	say := func(w int) string {
		if w == 0 {
			return "the driver's subgroup size"
		}
		return fmt.Sprintf("subgroups of %d (required)", w)
	}
	if f32 == q8 {
		return say(f32)
	}
	return fmt.Sprintf("f32 activations on %s, 8-bit on %s", say(f32), say(q8))
}
