package vk

/*
#include "cvk.h"
*/
import "C"

import (
	"fmt"
	"unsafe"

	vk "github.com/vulkan-go/vulkan"
)

// OpTime is the GPU time of one profiled dispatch.
type OpTime struct {
	Name   string
	Micros float64
	// Start is when the dispatch began, in µs after the sequence's first
	// profiled dispatch began: a run of dependent dispatches spans
	// last.Start + last.Micros, gaps between them included.
	Start float64
}

// queriesPerPool is the size of each timestamp query pool; a sequence adds
// pools as it records more dispatches, so its length need not be known.
const queriesPerPool = 512

// profile holds a sequence's timestamp queries: two per profiled dispatch.
type profile struct {
	pools []vk.QueryPool
	names []string
}

func (p *profile) reset() { p.names = p.names[:0] }

// next reserves the two timestamps for a dispatch named name and returns
// the pool and the first query index. A pool is reset inside the command
// buffer just before its first use, so every Run starts it afresh.
func (p *profile) next(s *Sequence, name string) (uint64, uint32, error) {
	if !s.d.info.TimestampValid {
		return 0, 0, fmt.Errorf("vk: profiling %s: %s has no timestamps on its compute queue", name, s.d.info.Name)
	}
	q := 2 * len(p.names)
	i := q / queriesPerPool
	if i == len(p.pools) {
		ci := &vk.QueryPoolCreateInfo{
			SType:      vk.StructureTypeQueryPoolCreateInfo,
			QueryType:  vk.QueryTypeTimestamp,
			QueryCount: queriesPerPool,
		}
		var pool vk.QueryPool
		if err := check("creating timestamp query pool", int32(vk.CreateQueryPool(s.d.h, ci, nil, &pool))); err != nil {
			return 0, 0, err
		}
		p.pools = append(p.pools, pool)
	}
	id := uint64(uintptr(unsafe.Pointer(p.pools[i])))
	if q%queriesPerPool == 0 {
		C.vkr_reset_queries(s.d.fns, C.uint64_t(s.sc.cmd), C.uint64_t(id), 0, queriesPerPool)
	}
	p.names = append(p.names, name)
	return id, uint32(q % queriesPerPool), nil
}

// Label names the next dispatch in the profile beyond its pipeline name
// (a matrix shape, say), so that one kernel's table rows can be told apart.
// It costs nothing when profiling is off.
func (s *Sequence) Label(detail string) {
	if s.d.profiling.Load() {
		s.label = detail
	}
}

// Profiled is the number of dispatches recorded so far with timestamps
// (all of them while the device profiles, none otherwise): the index the
// next one will have in Timings, so that a caller can tell which
// dispatches an operation of its own recorded.
func (s *Sequence) Profiled() int { return len(s.prof.names) }

// Timings returns the GPU time of each dispatch recorded with profiling on,
// in recording order, as measured by the latest Run; nil before the first
// Run or when nothing was profiled.
func (s *Sequence) Timings() []OpTime {
	p := &s.prof
	if s.runs == 0 || len(p.names) == 0 || s.sc == nil {
		return nil
	}
	d := s.d
	ticks := make([]uint64, 2*len(p.names))
	for i, pool := range p.pools {
		first := i * queriesPerPool
		n := min(queriesPerPool, len(ticks)-first)
		if n <= 0 {
			break
		}
		const flags = 0x1 | 0x2 // VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT
		r := C.vkr_query_results(d.fns, C.uint64_t(d.id), C.uint64_t(uintptr(unsafe.Pointer(pool))), 0, C.uint32_t(n),
			C.size_t(8*n), unsafe.Pointer(&ticks[first]), 8, flags)
		if r != resSuccess {
			return nil
		}
	}
	mask := ^uint64(0)
	if bits := d.phys.timestampBits; bits < 64 {
		mask = 1<<bits - 1
	}
	us := func(dt uint64) float64 { return float64(dt&mask) * float64(d.info.TimestampPeriod) / 1e3 }
	out := make([]OpTime, len(p.names))
	for i, name := range p.names {
		out[i] = OpTime{Name: name, Micros: us(ticks[2*i+1] - ticks[2*i]), Start: us(ticks[2*i] - ticks[0])}
	}
	return out
}

func (p *profile) release(d *Device) {
	for _, pool := range p.pools {
		vk.DestroyQueryPool(d.h, pool, nil)
	}
	p.pools, p.names = nil, nil
}
