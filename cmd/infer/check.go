package main

import (
	"fmt"
	"math"
	"os"

	"github.com/spf13/pflag"
	"github.com/vkinfer/vkinfer/attention"
	"github.com/vkinfer/vkinfer/backend/cpu"
	"github.com/vkinfer/vkinfer/gguf"
	"github.com/vkinfer/vkinfer/model"
	"github.com/vkinfer/vkinfer/model/sample"
	"github.com/vkinfer/vkinfer/vk"
	"github.com/vkinfer/vkinfer/vk/engine"
)

// checkCmd runs the same tokens through the CPU reference engine and the
// Vulkan engine and compares their logits at every position: the check a
// user runs to trust a new driver or GPU.
func checkCmd(args []string) error {
	fs := pflag.NewFlagSet("infer check", pflag.ContinueOnError)
	var (
		path    = fs.StringP("model", "m", "", "GGUF model path or synth:PRESET[:FTYPE]")
		n       = fs.IntP("tokens", "n", 8, "prompt tokens to compare")
		device  = fs.Int("device", -1, "Vulkan device index")
		threads = fs.IntP("threads", "t", 0, "CPU threads")
		tol     = fs.Float64("tolerance", 0, "largest |GPU − CPU| logit difference allowed, relative to the largest |logit| (0: 2e-3, as prefill stages weights as f16; 3e-2 with 8-bit activations)")
		intDot  = fs.String("int-dot", "auto", intDotUsage)
		coop    = fs.String("coopmat", "auto", coopMatUsage)
		waveArg = fs.String("wave", "auto", waveUsage)
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *n < 1 {
		return fmt.Errorf("-n %d: need at least one token", *n)
	}
	wave, err := attention.ParseWave(*waveArg)
	if err != nil {
		return err
	}
	dot, err := parseIntDot(*intDot)
	if err != nil {
		return err
	}
	coopMat, coopInt8, err := parseCoopMat(*coop)
	if err != nil {
		return err
	}
	p, err := resolveModel(*path)
	if err != nil {
		return err
	}
	f, err := gguf.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	tokens := make([]int32, *n)
	run := func(name string, open func() (*model.Model, error)) ([]float32, error) {
		m, err := open()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		defer m.Close()
		for i := range tokens {
			tokens[i] = int32(1 + (i*7919)%(m.HP.Vocab-1)) // spread over the vocabulary
		}
		out, err := m.Forward(tokens, 0, true)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		return append([]float32(nil), out...), nil
	}
	opts := model.Options{Context: max(*n, 16), UBatch: 512}
	ref := cpu.New(*threads)
	ref.F16KV = true // the GPU cache is f16; compare like with like
	want, err := run("CPU", func() (*model.Model, error) { return model.Load(f, ref, opts) })
	if err != nil {
		return err
	}
	got, err := run("Vulkan", func() (*model.Model, error) {
		dev, err := vk.Open(vk.Options{Device: *device, AllowCPU: true})
		if err != nil {
			return nil, err
		}
		e, err := engine.New(dev, engine.Options{OwnDevice: true, Wave: wave, IntDot: dot, CoopMat: coopMat, CoopInt8: coopInt8})
		if err != nil {
			dev.Close()
			return nil, err
		}
		if *tol == 0 {
			*tol = 2e-3
			if e.IntDot() || e.CoopInt8() {
				*tol = 3e-2
			}
		}
		w, sg := e.Wave()
		fmt.Fprintf(os.Stderr, "check: %s (matrix products: %s; flash attention wave%d on subgroups of %d; matrix-vector products on %s) vs the CPU engine\n",
			e.Name(), describeProducts(e), w, sg, describeMatVecWave(e))
		return model.Load(f, e, opts)
	})
	if err != nil {
		return err
	}
	vocab := len(want) / *n
	var worst, scale float64
	agree := 0
	for i := range *n {
		w, g := want[i*vocab:(i+1)*vocab], got[i*vocab:(i+1)*vocab]
		for j := range w {
			worst = max(worst, math.Abs(float64(g[j]-w[j])))
			scale = max(scale, math.Abs(float64(w[j])))
		}
		if sample.Argmax(w) == sample.Argmax(g) {
			agree++
		}
	}
	fmt.Printf("%d positions × %d logits: max |GPU − CPU| = %.3g (max |logit| %.3g, relative %.3g), top-1 agrees at %d/%d\n",
		*n, vocab, worst, scale, worst/scale, agree, *n)
	if worst > *tol*scale {
		return fmt.Errorf("GPU and CPU logits differ by %.3g, more than %.3g × %.3g", worst, *tol, scale)
	}
	return nil
}
