// Package attention decides the geometry of the flash-attention kernel (the
// wave W of a lane group, the query rows Br and key columns Bc of a tile, the
// split-k count) as pure functions of a device's properties and the shape of
// a dispatch, and holds the float64 CPU reference the kernel is tested
// against. It imports nothing from Vulkan: the backend converts its device
// report into a Device, and tests feed it recorded property sets of real
// cards (../shared/testdata/devices).
package attention

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// PCI vendor ids the policy keys on.
const (
	VendorAMD    = 0x1002
	VendorNVIDIA = 0x10de
	VendorIntel  = 0x8086
	VendorMesa   = 0x10005 // Mesa's software devices (lavapipe / llvmpipe)
)

// Vulkan's guaranteed minimums, used where a property is unknown: a limit we
// have not been told is at least what every conformant device offers.
const (
	minSharedMemory         = 16384
	minWorkgroupInvocations = 128
)

// Device is the part of a device report the policy needs. A zero field means
// "unknown" (recorded property sets often lack some); the policy then assumes
// only what Vulkan guarantees.
type Device struct {
	VendorID, DeviceID uint32
	Name               string
	Driver             string

	// SubgroupSize is the size a compute pipeline gets when it does not
	// require one (VkPhysicalDeviceSubgroupProperties.subgroupSize). Every
	// AMD driver reports 64 here, RDNA included, so it says nothing about
	// whether wave32 exists.
	SubgroupSize int
	// MinSubgroupSize and MaxSubgroupSize bound what a pipeline may require
	// (VK_EXT_subgroup_size_control). RDNA reports 32..64, GCN 64..64.
	MinSubgroupSize, MaxSubgroupSize int
	// SizeControl is true when a compute pipeline can require a subgroup size
	// with full subgroups: subgroupSizeControl and computeFullSubgroups are on
	// and requiredSubgroupSizeStages lists the compute stage (it can be empty
	// even with size control on).
	SizeControl bool

	SharedMemory            int // maxComputeSharedMemorySize, bytes
	MaxWorkgroupInvocations int // maxComputeWorkGroupInvocations
	ComputeUnits            int // CUs / SMs / Xe cores
}

// subgroupRange returns the subgroup sizes a pipeline may require. When the
// device did not report a range, the default size is the only one known.
func (d Device) subgroupRange() (lo, hi int) {
	lo, hi = d.MinSubgroupSize, d.MaxSubgroupSize
	if lo == 0 || hi == 0 {
		return d.SubgroupSize, d.SubgroupSize
	}
	return lo, hi
}

func (d Device) sharedMemory() int {
	if d.SharedMemory == 0 {
		return minSharedMemory
	}
	return d.SharedMemory
}

func (d Device) maxInvocations() int {
	if d.MaxWorkgroupInvocations == 0 {
		return minWorkgroupInvocations
	}
	return d.MaxWorkgroupInvocations
}

// LoadDevice reads a recorded property set (the JSON files of
// testdata/devices: Vulkan member names as keys, values as JSON numbers or
// as the strings vulkaninfo prints). Absent properties stay zero. Two values
// are deduced rather than read, because they are determined by others:
//   - the vendor of a driver that only drives one vendor's GPUs (RADV, AMDVLK,
//     AMD's proprietary driver) when vendorID is missing;
//   - the default subgroup size when it is missing but min == max.
func LoadDevice(path string) (Device, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Device{}, err
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return Device{}, fmt.Errorf("%s: %w", path, err)
	}
	var d Device
	var errs []string
	num := func(key string) int {
		v, ok := m[key]
		if !ok {
			return 0
		}
		n, err := parseNumber(v)
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", key, err))
		}
		return int(n)
	}
	flag := func(key string) bool {
		switch v := m[key].(type) {
		case bool:
			return v
		case string:
			return v == "true"
		}
		return false
	}
	str := func(key string) string {
		s, _ := m[key].(string)
		return s
	}

	d.VendorID = uint32(num("vendorID"))
	d.DeviceID = uint32(num("deviceID"))
	d.Name = str("deviceName")
	d.Driver = str("driverName")
	driverID := str("driverID")
	if d.Driver == "" {
		d.Driver = driverID
	}
	d.SubgroupSize = num("subgroupSize")
	d.MinSubgroupSize = num("minSubgroupSize")
	d.MaxSubgroupSize = num("maxSubgroupSize")
	d.SharedMemory = num("maxComputeSharedMemorySize")
	d.MaxWorkgroupInvocations = num("maxComputeWorkGroupInvocations")

	stages, _ := m["requiredSubgroupSizeStages"].([]any)
	compute := false
	for _, s := range stages {
		if s, ok := s.(string); ok && strings.Contains(s, "COMPUTE_BIT") {
			compute = true
		}
	}
	d.SizeControl = flag("subgroupSizeControl") && flag("computeFullSubgroups") && compute

	if sc, ok := m["shaderCoreProperties2"].(map[string]any); ok {
		if n, err := parseNumber(sc["activeComputeUnitCount"]); err == nil {
			d.ComputeUnits = int(n)
		}
	}
	if sc, ok := m["shaderCoreProperties"].(map[string]any); ok && d.ComputeUnits == 0 {
		a, e1 := parseNumber(sc["shaderEngineCount"])
		b, e2 := parseNumber(sc["shaderArraysPerEngineCount"])
		c, e3 := parseNumber(sc["computeUnitsPerShaderArray"])
		if e1 == nil && e2 == nil && e3 == nil {
			d.ComputeUnits = int(a * b * c)
		}
	}
	if sm, ok := m["shaderSMBuiltinsPropertiesNV"].(map[string]any); ok && d.ComputeUnits == 0 {
		if n, err := parseNumber(sm["shaderSMCount"]); err == nil {
			d.ComputeUnits = int(n)
		}
	}

	if d.VendorID == 0 && amdOnlyDriver(d.Driver, driverID) {
		d.VendorID = VendorAMD
	}
	if d.SubgroupSize == 0 && d.MinSubgroupSize != 0 && d.MinSubgroupSize == d.MaxSubgroupSize {
		d.SubgroupSize = d.MinSubgroupSize
	}
	if len(errs) > 0 {
		return d, fmt.Errorf("%s: %s", path, strings.Join(errs, "; "))
	}
	return d, nil
}

// amdOnlyDriver reports whether a driver name or id belongs to a driver that
// exists only for AMD GPUs.
func amdOnlyDriver(name, id string) bool {
	switch strings.ToLower(name) {
	case "radv", "amd open-source driver", "amd proprietary driver":
		return true
	}
	return strings.Contains(id, "MESA_RADV") || strings.Contains(id, "AMD_OPEN_SOURCE") ||
		strings.Contains(id, "AMD_PROPRIETARY")
}

// parseNumber accepts a JSON number or a decimal / 0x-hex string.
func parseNumber(v any) (int64, error) {
	switch v := v.(type) {
	case float64:
		return int64(v), nil
	case string:
		return strconv.ParseInt(v, 0, 64)
	case nil:
		return 0, fmt.Errorf("absent")
	}
	return 0, fmt.Errorf("unexpected %T", v)
}
