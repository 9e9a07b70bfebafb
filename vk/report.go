package vk

import (
	"fmt"
	"strings"
)

// driverVersionString decodes DriverVersion with the vendor's own packing,
// which Vulkan leaves to each driver.
func driverVersionString(vendor, v uint32) string {
	switch vendor {
	case 0x10de: // NVIDIA: 10.8.8.6 bits
		return fmt.Sprintf("%d.%d.%d.%d", v>>22, (v>>14)&0xff, (v>>6)&0xff, v&0x3f)
	case 0x8086:
		// Intel's Windows driver packs 18.14 bits (101.4146 and the like,
		// so the top 10 bits are 0); Mesa's ANV uses the Vulkan packing.
		if v>>22 == 0 {
			return fmt.Sprintf("%d.%d", v>>14, v&0x3fff)
		}
	}
	return versionString(v)
}

// reportLine writes one "label value" line of a device report.
func reportLine(b *strings.Builder, label, format string, args ...any) {
	fmt.Fprintf(b, "  %-16s %s\n", label, fmt.Sprintf(format, args...))
}

// Report renders the multi-line description `infer devices` prints.
func (i DeviceInfo) Report() string {
	var b strings.Builder
	line := func(label, format string, args ...any) { reportLine(&b, label, format, args...) }
	fmt.Fprintf(&b, "Device %d: %s\n", i.Index, i.Name)
	line("type", "%s (vendor %#06x, device %#06x)", i.Type, i.VendorID, i.DeviceID)
	driver := i.Driver
	if i.DriverInfo != "" {
		driver += ", " + i.DriverInfo
	}
	line("driver", "%s (version %s)", strings.TrimPrefix(driver, ", "), driverVersionString(i.VendorID, i.DriverVersion))
	line("Vulkan", "%s", i.APIVersion)
	u := i.UUID
	line("UUID", "%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
	sub := fmt.Sprintf("%d (range %d..%d)", i.SubgroupSize, i.MinSubgroupSize, i.MaxSubgroupSize)
	if i.SizeControl {
		sub += ", size control for compute"
	} else {
		sub += ", no compute size control"
	}
	line("subgroup", "%s", sub)
	cu := "unknown"
	if i.ComputeUnits > 0 {
		cu = fmt.Sprint(i.ComputeUnits)
	}
	line("compute units", "%s", cu)
	line("shared memory", "%s per workgroup", fmtBytes(uint64(i.SharedMemory)))
	c := i.MaxWorkgroupCount
	line("workgroups", "up to %d invocations, %d×%d×%d groups", i.MaxWorkgroupInvocations, c[0], c[1], c[2])
	line("max allocation", "%s (storage binding %s)", fmtBytes(i.MaxAllocation), fmtBytes(i.MaxStorageRange))
	for n, h := range i.Heaps {
		kind := "host"
		if h.DeviceLocal {
			kind = "device-local"
		}
		budget := ""
		if h.Budget != h.Size {
			budget = fmt.Sprintf(", budget %s", fmtBytes(h.Budget))
		}
		line(fmt.Sprintf("heap %d", n), "%s %s%s", fmtBytes(h.Size), kind, budget)
	}
	var have, lack []string
	for _, f := range []struct {
		name string
		on   bool
	}{
		{"fp16", i.FP16}, {"int8", i.Int8}, {"storage16", i.Storage16}, {"storage8", i.Storage8},
		{"integer-dot", i.IntegerDot}, {"dot4x8-native", i.IntegerDot && i.DotAccelerated}, {"coop-matrix", i.CoopMatrix},
		{"memory-model", i.VulkanMemoryModel}, {"pipeline-stats", i.PipelineStatistics},
	} {
		if f.on {
			have = append(have, f.name)
		} else {
			lack = append(lack, f.name)
		}
	}
	feats := strings.Join(have, " ")
	if len(lack) > 0 {
		feats += " (lacks " + strings.Join(lack, " ") + ")"
	}
	line("features", "%s", strings.TrimSpace(feats))
	ts := "no"
	if i.TimestampValid {
		ts = fmt.Sprintf("yes, %g ns per tick", i.TimestampPeriod)
	}
	line("timestamps", "%s", ts)
	if i.Unusable != "" {
		line("unusable", "%s", i.Unusable)
	}
	if i.CannotRun != "" {
		line("cannot run work", "%s", i.CannotRun)
	}
	return b.String()
}

// ReportVerbose is Report plus the queue family Open uses and why, and the
// cooperative-matrix shapes (`infer devices --verbose`).
func (i DeviceInfo) ReportVerbose() string {
	var b strings.Builder
	b.WriteString(i.Report())
	if i.Queue < 0 {
		reportLine(&b, "queue", "none: %s (%d families)", i.QueueReason, len(i.QueueFamilies))
	} else {
		reportLine(&b, "queue", "family %d of %d (%s): %s", i.Queue, len(i.QueueFamilies), i.QueueFamilies[i.Queue], i.QueueReason)
	}
	coop := "none"
	switch {
	case i.CoopMatrix:
		coop = CoopMatSummary(i.CoopMatShapes)
	case i.CoopMatrixOff != "":
		coop += ": " + i.CoopMatrixOff
	}
	reportLine(&b, "coop matrix", "%s", coop)
	return b.String()
}
