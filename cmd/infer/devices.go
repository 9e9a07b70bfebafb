package main

import (
	"fmt"

	"github.com/spf13/pflag"
	"github.com/vkinfer/vkinfer/vk"
)

// devicesCmd lists every Vulkan device with the properties that decide how
// vkinfer runs on it.
func devicesCmd(args []string) error {
	fs := pflag.NewFlagSet("infer devices", pflag.ContinueOnError)
	if err := fs.Parse(args); err != nil {
		return err
	}
	devs, err := vk.Devices()
	if err != nil {
		return err
	}
	if len(devs) == 0 {
		return fmt.Errorf("no Vulkan devices found")
	}
	for _, d := range devs {
		fmt.Print(d.Report())
		fmt.Println()
	}
	return nil
}
