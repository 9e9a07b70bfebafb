package vk

/*
#include "cvk.h"
*/
import "C"

import (
	"fmt"
	"strconv"
	"unsafe"
)

// StatisticFormat is the type of a Statistic's value
// (VkPipelineExecutableStatisticFormatKHR).
type StatisticFormat uint32

// The formats a driver may report a statistic in.
const (
	StatBool32 StatisticFormat = iota
	StatInt64
	StatUint64
	StatFloat64
)

// Statistic is one figure the driver reports about a compiled pipeline,
// such as NVIDIA's register count or AMD's VGPRs and SGPRs. Names,
// descriptions and units are the driver's own; the value is in the field
// Format selects.
type Statistic struct {
	Name, Description string
	Format            StatisticFormat
	Bool              bool    // StatBool32
	Int               int64   // StatInt64
	Uint              uint64  // StatUint64
	Float             float64 // StatFloat64
}

// Value renders the statistic's value.
func (s Statistic) Value() string {
	switch s.Format {
	case StatBool32:
		return strconv.FormatBool(s.Bool)
	case StatInt64:
		return strconv.FormatInt(s.Int, 10)
	case StatUint64:
		return strconv.FormatUint(s.Uint, 10)
	case StatFloat64:
		return strconv.FormatFloat(s.Float, 'g', -1, 64)
	}
	return "?"
}

// Number is the value as a float64, and false for a boolean statistic.
func (s Statistic) Number() (float64, bool) {
	switch s.Format {
	case StatInt64:
		return float64(s.Int), true
	case StatUint64:
		return float64(s.Uint), true
	case StatFloat64:
		return s.Float, true
	}
	return 0, false
}

// String is "Name=value", the form logs print.
func (s Statistic) String() string { return s.Name + "=" + s.Value() }

// Statistics returns what the driver reports about the pipeline's compiled
// compute shader, through VK_KHR_pipeline_executable_properties; devices
// without it (DeviceInfo.PipelineStatistics false) give an error. Pipelines
// are compiled with their statistics captured whenever the device supports
// it, so this is only a query and may be called at any time.
func (p *Pipeline) Statistics() ([]Statistic, error) {
	d := p.d
	d.mu.RLock()
	defer d.mu.RUnlock()
	if err := d.alive(); err != nil {
		return nil, err
	}
	if !d.info.PipelineStatistics {
		return nil, fmt.Errorf("vk: the device does not report pipeline statistics (%s lacks %s)", d.info.Name, extPipelineExecutableProperties)
	}
	exe, _, err := p.computeExecutable()
	if err != nil {
		return nil, err
	}
	info := &pipelineExecutableInfo{sType: stPipelineExecutableInfo, pipeline: p.id, executableIndex: exe}
	var n C.uint32_t
	r := C.vkr_pipeline_statistics(d.fns, C.uint64_t(d.id), unsafe.Pointer(info), &n, nil)
	if err := check("counting pipeline statistics", int32(r)); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, nil
	}
	raw := make([]pipelineExecutableStatistic, n)
	for i := range raw {
		raw[i].sType = stPipelineExecutableStatistic
	}
	r = C.vkr_pipeline_statistics(d.fns, C.uint64_t(d.id), unsafe.Pointer(info), &n, unsafe.Pointer(&raw[0]))
	if err := check("reading pipeline statistics", int32(r)); err != nil {
		return nil, err
	}
	out := make([]Statistic, 0, n)
	for _, st := range raw[:n] {
		s := Statistic{Name: cString(st.name[:]), Description: cString(st.description[:]), Format: StatisticFormat(st.format)}
		switch s.Format {
		case StatBool32:
			s.Bool = uint32(st.value) != 0 // a VkBool32 in the union's first 4 bytes (little-endian)
		case StatInt64:
			s.Int = int64(st.value)
		case StatUint64:
			s.Uint = st.value
		case StatFloat64:
			s.Float = *(*float64)(unsafe.Pointer(&st.value))
		}
		out = append(out, s)
	}
	return out, nil
}

// DriverSubgroupSize is the subgroup size the driver compiled the
// pipeline's compute shader for (VkPipelineExecutablePropertiesKHR's
// subgroupSize): what it runs with, required (SubgroupSize) or the
// driver's own choice. Like Statistics it needs DeviceInfo.PipelineStatistics.
func (p *Pipeline) DriverSubgroupSize() (int, error) {
	d := p.d
	d.mu.RLock()
	defer d.mu.RUnlock()
	if err := d.alive(); err != nil {
		return 0, err
	}
	if !d.info.PipelineStatistics {
		return 0, fmt.Errorf("vk: the device does not report pipeline executables (%s lacks %s)", d.info.Name, extPipelineExecutableProperties)
	}
	_, size, err := p.computeExecutable()
	return size, err
}

// computeExecutable finds the index of the executable that runs the compute
// stage, and its subgroup size. A compute pipeline normally has exactly
// one; a driver may list helpers beside it, so the stage decides rather
// than the position.
func (p *Pipeline) computeExecutable() (index uint32, subgroup int, err error) {
	d := p.d
	info := &pipelineInfo{sType: stPipelineInfo, pipeline: p.id}
	var n C.uint32_t
	r := C.vkr_pipeline_executables(d.fns, C.uint64_t(d.id), unsafe.Pointer(info), &n, nil)
	if err := check("counting pipeline executables", int32(r)); err != nil {
		return 0, 0, err
	}
	if n == 0 {
		return 0, 0, fmt.Errorf("vk: pipeline %q: the driver lists no executables", p.spec.Name)
	}
	props := make([]pipelineExecutableProperties, n)
	for i := range props {
		props[i].sType = stPipelineExecutableProperties
	}
	r = C.vkr_pipeline_executables(d.fns, C.uint64_t(d.id), unsafe.Pointer(info), &n, unsafe.Pointer(&props[0]))
	if err := check("listing pipeline executables", int32(r)); err != nil {
		return 0, 0, err
	}
	for i, e := range props[:n] {
		if e.stages&shaderStageCompute != 0 {
			return uint32(i), int(e.subgroupSize), nil
		}
	}
	return 0, int(props[0].subgroupSize), nil
}
