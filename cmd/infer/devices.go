package main

import (
	"fmt"

	"github.com/spf13/pflag"
	"github.com/vkinfer/vkinfer/vk"
	"github.com/vkinfer/vkinfer/vk/engine"
)

// devicesCmd lists every Vulkan device with the properties that decide how
// vkinfer runs on it; --verbose adds the queue family it would use and why,
// the cooperative-matrix shapes it offers, and what the cooperative-matrix
// policy makes of them (--coopmat auto).
func devicesCmd(args []string) error {
	fs := pflag.NewFlagSet("infer devices", pflag.ContinueOnError)
	verbose := fs.Bool("verbose", false, "also say which queue family vkinfer uses on each device and why, and its cooperative-matrix shapes and policy")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("devices: unexpected argument %q", fs.Arg(0))
	}
	devs, err := vk.Devices()
	if err != nil {
		return err
	}
	if len(devs) == 0 {
		return fmt.Errorf("no Vulkan devices found")
	}
	for _, d := range devs {
		if *verbose {
			fmt.Print(d.ReportVerbose())
			c := engine.CoopMatChoice(d)
			state := "off"
			if c.On() {
				state = c.String()
			}
			fmt.Printf("  %-16s %s: %s\n", "coopmat policy", state, c.Reason)
		} else {
			fmt.Print(d.Report())
		}
		fmt.Println()
	}
	return nil
}
