package vk

import (
	"runtime"
	"runtime/debug"
	"sync"

	vk "github.com/vulkan-go/vulkan"
)

// The binding converts every nested slice of a create-info struct to C memory
// in a helper that sets a finalizer on a local variable and then drops its
// only reference, so a garbage collection during the call can free the C
// structs while the driver (or the validation layer) still reads them. We
// measured it: vkCreateComputePipelines crashed inside the validation layer
// in about one run in ten under load, because compiling a pipeline is slow
// enough for a GC cycle to finish. Output slices are converted the same way,
// so an enumeration's driver writes into memory already freed. Calls that
// take or fill such slices run with automatic GC paused; they are all setup
// calls, never on the hot path.
//
// debug.SetGCPercent(-1) waits for the mark phase of the cycle it sees, but
// a cycle that another goroutine was starting at that moment (its trigger
// checked, the world not yet stopped) still runs after it returns, and
// objects allocated before its mark began are unreachable to it:
// TestEnumerationsSurviveGC failed one run in 20 so. The first pause
// therefore runs one forced cycle, under the lock, before anything is
// allocated: after it none is running, and with GC off none can start.
// Nested and concurrent pauses find GC off already and run none; a
// runtime.GC anywhere else would run a cycle inside a pause, so nothing
// else here calls it.
var gcPause struct {
	sync.Mutex
	depth int
	prev  int
}

// WithoutGC runs f with automatic garbage collection off and no cycle
// running. Nested and concurrent uses are counted; the last one out
// restores the GC percentage. Every setup call runs inside one; a caller
// that makes a burst of them (a program recording the pipelines it is the
// first to use) wraps the burst in one too, so that the calls share one
// forced collection instead of paying about 10 ms each. f should allocate
// little, since nothing is collected until it returns.
func WithoutGC(f func()) {
	gcPause.Lock()
	if gcPause.depth == 0 {
		gcPause.prev = debug.SetGCPercent(-1)
		runtime.GC()
	}
	gcPause.depth++
	gcPause.Unlock()
	defer func() {
		gcPause.Lock()
		gcPause.depth--
		if gcPause.depth == 0 {
			debug.SetGCPercent(gcPause.prev)
		}
		gcPause.Unlock()
	}()
	f()
}

// paused is WithoutGC for a binding call that returns a vk.Result.
func paused(call func() vk.Result) (r vk.Result) {
	WithoutGC(func() { r = call() })
	return r
}
