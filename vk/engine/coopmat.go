package engine

import (
	"fmt"

	"github.com/vkinfer/vkinfer/coopmat"
	"github.com/vkinfer/vkinfer/vk"
)

// coopmatDevice converts a device report into what the cooperative-matrix
// policy reads.
func coopmatDevice(info vk.DeviceInfo) coopmat.Device {
	d := coopmat.Device{
		VendorID: info.VendorID, DeviceID: info.DeviceID, Name: info.Name, Driver: info.Driver,
		SubgroupSize: info.SubgroupSize, MinSubgroupSize: info.MinSubgroupSize, MaxSubgroupSize: info.MaxSubgroupSize,
		SizeControl: info.SizeControl, SharedMemory: info.SharedMemory, MixedDot: info.DotMixedAccelerated,
		Unusable: info.CoopMatrixOff,
	}
	if !info.CoopMatrix {
		return d
	}
	for _, s := range info.CoopMatShapes {
		d.Shapes = append(d.Shapes, coopmat.Fragment{M: s.M, N: s.N, K: s.K, A: s.A, B: s.B, C: s.C, Result: s.Result,
			Saturating: s.Saturating, Scope: s.Scope})
	}
	return d
}

// CoopMatChoice is the cooperative-matrix policy's choice for a device
// (coopmat.Choose), what New uses when Options.CoopMat is nil.
func CoopMatChoice(info vk.DeviceInfo) coopmat.Choice { return coopmat.Choose(coopmatDevice(info)) }

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
