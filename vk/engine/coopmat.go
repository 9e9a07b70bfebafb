package engine

import (
	"fmt"

	"github.com/vkinfer/vkinfer/coopmat"
	"github.com/vkinfer/vkinfer/vk"
	"github.com/vkinfer/vkinfer/vk/kernels"
)

// CoopMatChoice is the cooperative-matrix policy's choice for a device
// (coopmat.Choose), what New uses when Options.CoopMat is nil.
func CoopMatChoice(info vk.DeviceInfo) coopmat.Choice {
	return coopmat.Choose(kernels.CoopDevice(info))
}

// coopMatFor resolves Options.CoopMat on a device: nil takes the policy's
// choice, false turns the cooperative matrices off, and true insists on
// them, failing with the policy's reason where it says off. An off choice
// is the zero choice but for its Reason.
func coopMatFor(info vk.DeviceInfo, want *bool) (coopmat.Choice, error) {
	c := CoopMatChoice(info)
	switch {
	case want == nil:
		if !c.On() {
			return coopmat.Choice{Reason: c.Reason}, nil
		}
		return c, nil
	case !*want:
		return coopmat.Choice{Reason: "was asked not to use them"}, nil
	case !c.On():
		return coopmat.Choice{}, fmt.Errorf("vulkan: cooperative matrices asked for, but %s %s", info.Name, c.Reason)
	}
	return c, nil
}

// coopInt8For checks that a device whose cooperative-matrix choice is c
// can run the integer variant (Options.CoopInt8): the choice on, an 8-bit
// shape the variant takes (coopmat.Int8Shape), and shaderInt8.
func coopInt8For(info vk.DeviceInfo, c coopmat.Choice) error {
	if !c.On() {
		return fmt.Errorf("vulkan: integer cooperative-matrix products asked for, but cooperative matrices are off: %s %s", info.Name, c.Reason)
	}
	if s, why := coopmat.Int8Shape(c); s.IsZero() {
		return fmt.Errorf("vulkan: integer cooperative-matrix products asked for, but %s %s", info.Name, why)
	}
	if !info.Int8 {
		return fmt.Errorf("vulkan: integer cooperative-matrix products asked for, but %s lacks shaderInt8", info.Name)
	}
	return nil
}
