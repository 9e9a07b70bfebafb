package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/vkinfer/vkinfer/gguf"
	"github.com/vkinfer/vkinfer/model/synth"
)

// genCmd writes a synthetic model: `infer gen --preset tiny -o tiny.gguf`.
func genCmd(args []string) error {
	fs := pflag.NewFlagSet("infer gen", pflag.ContinueOnError)
	var (
		preset = fs.String("preset", "", "model geometry: "+strings.Join(synth.Presets(), ", "))
		out    = fs.StringP("output", "o", "", "GGUF file to write")
		ftype  = fs.String("ftype", synth.DefaultFtype, "type mix: "+strings.Join(synth.Ftypes(), ", "))
		seed   = fs.Uint64("seed", 0, "random seed; the same seed gives the same file")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("gen: unexpected argument %q (see infer gen --help)", fs.Arg(0))
	case *preset == "":
		return fmt.Errorf("gen: --preset is required (one of %s)", strings.Join(synth.Presets(), ", "))
	case *out == "":
		return fmt.Errorf("gen: -o is required (the GGUF file to write)")
	}

	t0 := time.Now()
	// The total is only known once synth has planned the tensors, so the
	// bar (which stays hidden for small files) is made on the first report.
	var bar *progress
	err := synth.Write(*out, *preset, *ftype, *seed, func(done, total uint64) {
		if bar == nil {
			bar = newProgress(os.Stderr, "writing", int64(total))
		}
		bar.update(done, total)
	})
	if bar != nil {
		bar.done()
	}
	if err != nil {
		return err
	}
	took := time.Since(t0)

	// Reading the file back checks it and gives the figures for the summary.
	f, err := gguf.Open(*out)
	if err != nil {
		return fmt.Errorf("gen: the written file does not read back: %w", err)
	}
	defer f.Close()
	fmt.Fprintf(os.Stderr, "wrote %s: %s %s seed %d, %s, %d tensors in %v\n",
		*out, *preset, *ftype, *seed, humanBytes(uint64(f.Size())), len(f.Tensors()), took.Round(time.Millisecond))
	return nil
}
