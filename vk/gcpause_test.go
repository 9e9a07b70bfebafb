package vk

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"testing"

	vk "github.com/vulkan-go/vulkan"
)

// TestEnumerationsSurviveGC enumerates layers, extensions and queue families
// over and over while another goroutine allocates with the GC at its most
// eager. The binding hands the driver C arrays that a finalizer may free
// mid-call (docs/VULKAN.md); without paused GC around these calls the C
// heap is corrupted within a few rounds.
func TestEnumerationsSurviveGC(t *testing.T) {
	in, err := sharedInstance(false, false)
	needVulkan(t, err)
	phys, err := in.physicalDevices()
	must(t, err)
	if len(phys) == 0 {
		t.Fatal("no physical devices")
	}
	p := phys[0]

	snapshot := func() (string, error) {
		layers, err := instanceLayers()
		if err != nil {
			return "", err
		}
		iexts, err := instanceExtensions("")
		if err != nil {
			return "", err
		}
		dexts, err := deviceExtensions(p.h)
		if err != nil {
			return "", err
		}
		p.queryQueues()
		return fmt.Sprint(layers, iexts, dexts, p.info.QueueFamilies), nil
	}
	want, err := snapshot()
	must(t, err)

	defer debug.SetGCPercent(debug.SetGCPercent(1))
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var keep [][]byte
		for !stop.Load() {
			keep = append(keep, make([]byte, 64<<10))
			if len(keep) > 64 {
				keep = keep[:0]
			}
		}
		runtime.KeepAlive(keep)
	}()
	defer func() { stop.Store(true); wg.Wait() }()

	for i := range 300 {
		got, err := snapshot()
		must(t, err)
		if got != want {
			t.Fatalf("round %d: enumeration changed under GC:\n got %s\nwant %s", i, got, want)
		}
	}
}

// TestWithoutGCOneCollection shows what WithoutGC is for: the setup calls
// inside it share one forced collection, where each pays its own outside
// it, and the GC percentage is back when it returns.
func TestWithoutGCOneCollection(t *testing.T) {
	forced := func() uint32 {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.NumForcedGC
	}
	calls := func() {
		for range 5 {
			paused(func() vk.Result { return vk.Success })
		}
	}
	before := forced()
	calls()
	if n := forced() - before; n != 5 {
		t.Fatalf("5 setup calls ran %d forced collections, want 5", n)
	}
	before = forced()
	WithoutGC(calls)
	if n := forced() - before; n != 1 {
		t.Fatalf("5 setup calls inside WithoutGC ran %d forced collections, want 1", n)
	}
	if pct := debug.SetGCPercent(100); pct < 0 {
		t.Fatalf("GC percentage after WithoutGC: %d", pct)
	} else {
		debug.SetGCPercent(pct)
	}
}
