// Command infer runs GGUF language models on the GPU (Vulkan) or the CPU.
//
//	infer -m model.gguf -p "Once upon a time"   generate text (the default command)
//	infer chat -m model.gguf                    an interactive conversation (the model's chat template)
//	infer serve -m model.gguf                   an OpenAI-compatible HTTP server
//	infer loadgen -m model.gguf                 the server's total tokens/s at 1, 4, 16 and 64 concurrent streams
//	infer gen --preset tiny -o tiny.gguf        write a synthetic model
//	infer devices                               list Vulkan devices
//	infer bench -m model.gguf                   llama-bench-style throughput tests
//	infer check -m model.gguf                   compare the GPU engine with the CPU engine
//	infer tune                                  sweep kernel geometry on this device
//	infer kernels -m model.gguf                 the engine's pipelines for a model, with the compiler's statistics
//	infer --version                             the commit the binary was built from
package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"github.com/spf13/pflag"
	"github.com/vkinfer/vkinfer/internal/buildinfo"
)

// commands maps a subcommand to its entry point; anything else is `run`.
var commands = map[string]func(args []string) error{
	"run":     runCmd,
	"gen":     genCmd,
	"devices": devicesCmd,
	"bench":   benchCmd,
	"check":   checkCmd,
	"tune":    tuneCmd,
	"kernels": kernelsCmd,
	"chat":    chatCmd,
	"serve":   serveCmd,
	"loadgen": loadgenCmd,
}

func main() {
	args := os.Args[1:]
	if len(args) == 1 && args[0] == "--version" {
		fmt.Println(version())
		return
	}
	cmd := runCmd
	if len(args) > 0 {
		if c, ok := commands[args[0]]; ok {
			cmd, args = c, args[1:]
		}
	}
	if err := cmd(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return
		}
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		os.Exit(1)
	}
}

// version is what infer --version prints: the commit, its time, and the
// Go toolchain and platform that built the binary.
func version() string {
	b := buildinfo.Read()
	v := "infer version " + b.Commit
	if b.Time != "" {
		v += " (" + b.Time + ")"
	}
	return fmt.Sprintf("%s, built with %s for %s/%s", v, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
