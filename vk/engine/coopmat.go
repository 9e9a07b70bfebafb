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
