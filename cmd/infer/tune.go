package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/pflag"
	"github.com/vkinfer/vkinfer/gguf"
	"github.com/vkinfer/vkinfer/tune"
	"github.com/vkinfer/vkinfer/vk"
)

// tuneCmd sweeps kernel geometry on one device and saves the winners as
// the device's profile:
// `infer tune [-m MODEL] [--kernels matmul,matvec,matmul_q8,matvec_q8,matmul_coopmat,attention] [--quick]`.
// The _q8 kernels (8-bit activations) are skipped, with a note, on devices
// without integer dot products, and matmul_coopmat (the prefill product on
// cooperative matrices) on those where the cooperative-matrix policy is
// off (coopmat.Choose: no VK_KHR_cooperative_matrix, or hardware that
// would only emulate it).
func tuneCmd(args []string) error {
	fs := pflag.NewFlagSet("infer tune", pflag.ContinueOnError)
	var (
		modelSpec, output, profile string
		device, reps               int
		kernels                    []string
		show, quick                bool
	)
	fs.StringVarP(&modelSpec, "model", "m", "", "GGUF path or synth:PRESET[:FTYPE] whose shapes to tune (default: the Llama-3-8B Q4_K_M geometry, no file needed)")
	fs.IntVar(&device, "device", -1, "Vulkan device index from 'infer devices' (-1: best)")
	fs.StringSliceVar(&kernels, "kernels", tune.Kernels, "kernels to sweep: "+strings.Join(tune.Kernels, ", ")+
		" (the _q8 ones, on 8-bit activations, need integer dot products, and matmul_coopmat cooperative matrices that the device's policy turns on: skipped without)")
	fs.IntVarP(&reps, "repetitions", "r", 5, "timed runs of each variant (median reported)")
	fs.StringVarP(&output, "output", "o", "md", "output format: "+strings.Join(tune.Formats, ", "))
	fs.BoolVar(&show, "show", false, "print the profile in use for the device and exit")
	fs.BoolVar(&quick, "quick", false, "small shapes and few variants (software rasterisers, smoke tests)")
	fs.StringVar(&profile, "tune-profile", "", "with --show: the profile file to check (default: the device's own)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("tune: unexpected argument %q (see infer tune --help)", fs.Arg(0))
	}
	if !slices.Contains(tune.Formats, output) {
		return fmt.Errorf("-o %q: want one of %s", output, strings.Join(tune.Formats, ", "))
	}
	// The sweep measures one device: software ones too when asked, and
	// without the validation layer, which would be measured with it.
	dev, err := vk.Open(vk.Options{Device: device, AllowCPU: true})
	if err != nil {
		return err
	}
	defer dev.Close()
	if show {
		p, err := tuningFor(profile, dev.Info(), os.Stderr)
		if err != nil {
			return err
		}
		return showProfile(os.Stdout, p)
	}
	m := tune.Llama3_8B
	if modelSpec != "" {
		if m, err = tuneModel(modelSpec); err != nil {
			return err
		}
	}
	r, err := tune.Sweep(dev, m, tune.Options{Kernels: kernels, Reps: reps, Quick: quick, Log: os.Stderr})
	if err != nil {
		return err
	}
	path, err := tune.DefaultPath(dev.Info())
	if err == nil {
		err = saveMerged(r.Profile, path, dev.Info())
	}
	if err != nil {
		return err
	}
	if err := r.Write(os.Stdout, output); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "tune: profile saved to %s\n", path)
	return nil
}

// tuneModel reads the shapes of a model file (only its tensor table).
func tuneModel(spec string) (tune.Model, error) {
	path, err := resolveModel(spec)
	if err != nil {
		return tune.Model{}, err
	}
	f, err := gguf.Open(path)
	if err != nil {
		return tune.Model{}, err
	}
	defer f.Close()
	return tune.FromGGUF(f)
}

// saveMerged writes p to path, keeping the sections of a valid profile
// already there that this sweep did not measure (a --kernels matvec run
// leaves the tuned matmul tile in place).
func saveMerged(p *tune.Profile, path string, info vk.DeviceInfo) error {
	old, warn, err := tune.Load(path, info)
	switch {
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return err
	case warn != "":
		fmt.Fprintf(os.Stderr, "warning: %s (replacing it)\n", warn)
	case old != nil:
		p.MatMul = orElse(p.MatMul, old.MatMul)
		p.MatVec = orElse(p.MatVec, old.MatVec)
		p.MatMulQ8 = orElse(p.MatMulQ8, old.MatMulQ8)
		p.MatVecQ8 = orElse(p.MatVecQ8, old.MatVecQ8)
		p.MatMulCoop = orElse(p.MatMulCoop, old.MatMulCoop)
		p.Decode = orElse(p.Decode, old.Decode)
		p.Prefill = orElse(p.Prefill, old.Prefill)
	}
	return p.Save(path)
}

// orElse is the first of a, b that is not nil.
func orElse[T any](a, b *T) *T {
	if a != nil {
		return a
	}
	return b
}

const tuneProfileUsage = "kernel tuning profile from infer tune (default: the device's own, when it matches; none: built-in defaults)"

// tuningFor resolves --tune-profile for a device: "" looks for the
// device's own profile in the cache, "none" means the built-in defaults,
// anything else is a profile file, which must exist. A profile that is
// corrupt or was measured elsewhere is reported on warn in one line and
// ignored (nil).
func tuningFor(spec string, info vk.DeviceInfo, warn io.Writer) (*tune.Profile, error) {
	var (
		p   *tune.Profile
		msg string
	)
	switch spec {
	case "none":
		return nil, nil
	case "":
		p, msg = tune.Find(info)
	default:
		var err error
		if p, msg, err = tune.Load(spec, info); err != nil {
			return nil, fmt.Errorf("--tune-profile: %w", err)
		}
	}
	if msg != "" {
		fmt.Fprintf(warn, "warning: %s\n", msg)
	}
	return p, nil
}

// describeTuning is the --verbose line about the profile in use.
func describeTuning(p *tune.Profile) string {
	if p == nil {
		return "tuning profile: none, built-in defaults (run infer tune to measure this device)"
	}
	k := p.Key
	return fmt.Sprintf("tuning profile: %s (matched device %s, %s driver %d, vkinfer %s): %s",
		p.Path, k.Device, k.Driver, k.DriverVersion, k.Build, p)
}

// showProfile prints the profile in use for a device (infer tune --show).
func showProfile(w io.Writer, p *tune.Profile) error {
	if _, err := fmt.Fprintln(w, describeTuning(p)); err != nil || p == nil {
		return err
	}
	_, err := fmt.Fprintf(w, "measured %s on %s\n", p.Created.Format("2006-01-02 15:04 UTC"), p.Model)
	return err
}
