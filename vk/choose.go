package vk

import (
	"fmt"
	"strings"
)

// rank orders device types for automatic choice; CPU drivers rank last and
// are only taken when explicitly allowed or when nothing else exists.
func rank(t string) int {
	switch t {
	case "discrete":
		return 4
	case "integrated":
		return 3
	case "virtual":
		return 2
	case "other":
		return 1
	}
	return 0 // cpu
}

// choose picks the physical device Open will use.
func choose(devs []*physical, o Options) (*physical, error) {
	if len(devs) == 0 {
		return nil, fmt.Errorf("vulkan: no Vulkan device found")
	}
	if o.Device >= 0 {
		if o.Device >= len(devs) {
			return nil, fmt.Errorf("vulkan: device %d does not exist (%d device(s): %s)", o.Device, len(devs), deviceList(devs))
		}
		return devs[o.Device], usable(devs[o.Device])
	}
	var best *physical
	var skipped []string
	for _, p := range devs {
		if err := usable(p); err != nil {
			skipped = append(skipped, err.Error())
			continue
		}
		if best == nil || rank(p.info.Type) > rank(best.info.Type) {
			best = p
		}
	}
	if best == nil {
		return nil, fmt.Errorf("vulkan: no usable Vulkan device: %s", strings.Join(skipped, "; "))
	}
	if best.info.Type == "cpu" && !o.AllowCPU && hasGPU(devs) {
		// Other devices exist but none is usable; say why rather than
		// silently falling back to a software rasteriser.
		return nil, fmt.Errorf("vulkan: only the CPU driver %q is usable (%s); pass AllowCPU to use it", best.info.Name, strings.Join(skipped, "; "))
	}
	return best, nil
}

// usable reports why Open cannot run on p, or nil.
func usable(p *physical) error {
	if r := unusable(p); r != "" {
		return fmt.Errorf("device %d (%s) %s", p.info.Index, p.info.Name, r)
	}
	return nil
}

func deviceList(devs []*physical) string {
	names := make([]string, len(devs))
	for i, p := range devs {
		names[i] = fmt.Sprintf("%d: %s", i, p.info.Name)
	}
	return strings.Join(names, ", ")
}

func hasGPU(devs []*physical) bool {
	for _, p := range devs {
		if p.info.Type != "cpu" {
			return true
		}
	}
	return false
}
