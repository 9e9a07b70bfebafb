package vk

import "strings"

// VkQueueFlagBits.
const (
	queueGraphics = 0x1
	queueCompute  = 0x2
	queueTransfer = 0x4
	queueSparse   = 0x8
)

const vendorAMD = 0x1002

// QueueFamily is one queue family of a device, as its driver lists it.
type QueueFamily struct {
	Flags         uint32 // VkQueueFlags
	Count         uint32 // queues in the family
	TimestampBits uint32 // timestampValidBits; 0 means no timestamps
}

func (f QueueFamily) compute() bool { return f.Flags&queueCompute != 0 && f.Count > 0 }

func (f QueueFamily) graphicsCompute() bool { return f.compute() && f.Flags&queueGraphics != 0 }

// String names the family's capabilities, "graphics compute transfer".
func (f QueueFamily) String() string {
	var names []string
	for _, b := range []struct {
		bit  uint32
		name string
	}{{queueGraphics, "graphics"}, {queueCompute, "compute"}, {queueTransfer, "transfer"}, {queueSparse, "sparse"}} {
		if f.Flags&b.bit != 0 {
			names = append(names, b.name)
		}
	}
	if len(names) == 0 {
		return "no graphics or compute"
	}
	return strings.Join(names, " ")
}

// chooseQueueFamily is the queue policy: the family Open creates its one
// queue on, and why, from the vendor and the families' flags alone; -1 when
// no family can run compute work.
//
//   - AMD: a family with graphics and compute. AMD drivers (RADV, AMDVLK,
//     AMD's Windows driver) also offer a compute-only family, but decode
//     runs slower on it: llama.cpp measured token generation about 5%
//     faster on the graphics+compute family of an RX 9070 XT under RADV,
//     which also cured a partial-offload slowdown it had traced to a busy
//     compute queue, and moved AMD there (its PR 20551; docs/VULKAN.md).
//     A compute-only family is taken only when the device has no
//     graphics+compute one (a compute-only accelerator).
//   - Any other vendor: the first family with compute, in the driver's order.
//     Drivers list their general family first (NVIDIA, Intel, Apple and
//     lavapipe all give graphics+compute as family 0), so a compute-only
//     family is taken only where the driver lists it first or alone.
//
// A family counts only if it has at least one queue.
func chooseQueueFamily(vendor uint32, fams []QueueFamily) (int, string) {
	first := -1
	for i, f := range fams {
		if f.compute() {
			first = i
			break
		}
	}
	if first < 0 {
		return -1, "no queue family runs compute work"
	}
	if vendor != vendorAMD {
		return first, "the driver's first family with compute"
	}
	for i, f := range fams {
		if f.graphicsCompute() {
			return i, "AMD: graphics+compute, preferred to a compute-only family, on which decode runs slower (llama.cpp PR 20551)"
		}
	}
	return first, "AMD: a compute-only family, since the device has no graphics+compute one"
}
