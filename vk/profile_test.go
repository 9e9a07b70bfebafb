package vk

import (
	"testing"
)

func TestProfilingOneTimingPerDispatch(t *testing.T) {
	d := openTest(t)
	p := saxpy(t, d, 64)
	const n = 4096
	xb, err := d.NewBuffer(4*n, false)
	must(t, err)
	yb, err := d.NewBuffer(4*n, false)
	must(t, err)
	d.SetProfiling(true)
	s := d.NewSequence()
	// More dispatches than one query pool holds.
	const dispatches = queriesPerPool/2 + 3
	for i := 0; i < dispatches; i++ {
		if i == 1 {
			s.Label("detail") // names dispatch 1 only
		}
		s.Dispatch(p, []Binding{{Buf: xb}, {Buf: yb}}, Push(uint32(n), float32(1)), n/64, 1, 1)
		s.Barrier()
		if s.Profiled() != i+1 {
			t.Fatalf("after %d profiled dispatches Profiled() = %d", i+1, s.Profiled())
		}
	}
	d.SetProfiling(false)
	s.Dispatch(p, []Binding{{Buf: xb}, {Buf: yb}}, Push(uint32(n), float32(1)), n/64, 1, 1) // not profiled
	if s.Profiled() != dispatches {
		t.Errorf("an unprofiled dispatch counted: Profiled() = %d, want %d", s.Profiled(), dispatches)
	}
	must(t, s.End())
	if s.Timings() != nil {
		t.Error("Timings before Run should be nil")
	}
	for run := 0; run < 2; run++ {
		must(t, s.Run())
		ts := s.Timings()
		if len(ts) != dispatches {
			t.Fatalf("run %d: %d timings for %d profiled dispatches", run, len(ts), dispatches)
		}
		var total float64
		for i, op := range ts {
			want := "test_saxpy"
			if i == 1 {
				want += " detail"
			}
			if op.Name != want || op.Micros < 0 || op.Micros > 1e7 {
				t.Fatalf("timing %d = %+v", i, op)
			}
			// Behind a barrier each dispatch starts after the one before
			// it ended.
			if i == 0 && op.Start != 0 || i > 0 && op.Start < ts[i-1].Start+ts[i-1].Micros-1e-3 {
				t.Fatalf("timing %d starts at %g µs, before the end of the one before it (%+v)", i, op.Start, ts[max(i-1, 0)])
			}
			total += op.Micros
		}
		if total <= 0 {
			t.Errorf("run %d: all %d timings are zero", run, dispatches)
		}
	}
}

// TestManyDispatches overflows the first descriptor pool and checks that
// every dispatch still ran, in order, behind its barrier.
func TestManyDispatches(t *testing.T) {
	d := openTest(t)
	p := saxpy(t, d, 64)
	const n, k = 100, setsPerPool + 300
	xb, err := d.NewBuffer(4*n, true)
	must(t, err)
	yb, err := d.NewBuffer(4*n, false)
	must(t, err)
	ones := make([]float32, n)
	for i := range ones {
		ones[i] = 1
	}
	must(t, xb.WriteF32(0, ones))
	must(t, yb.WriteF32(0, make([]float32, n)))
	s := d.NewSequence()
	for i := 0; i < k; i++ {
		s.Dispatch(p, []Binding{{Buf: xb}, {Buf: yb}}, Push(uint32(n), float32(1)), 2, 1, 1)
		s.Barrier()
	}
	must(t, s.End())
	if len(s.dpools) < 2 {
		t.Fatalf("%d dispatches used %d descriptor pool(s); the test wants the overflow path", k, len(s.dpools))
	}
	must(t, s.Run())
	got := make([]float32, n)
	must(t, yb.ReadF32(0, got))
	for i, v := range got {
		if v != k {
			t.Fatalf("y[%d] = %v after %d dispatches, want %d", i, v, k, k)
		}
	}
}

// TestDispatchAllocs: recording a dispatch allocates nothing in Go once
// the sequence has its descriptor pool.
func TestDispatchAllocs(t *testing.T) {
	d := openTest(t)
	p := saxpy(t, d, 64)
	xb, err := d.NewBuffer(4096, false)
	must(t, err)
	s := d.NewSequence()
	bind := []Binding{{Buf: xb}, {Buf: xb, Off: 0, Size: 2048}}
	pc := Push(uint32(512), float32(2))
	s.Dispatch(p, bind, pc, 8, 1, 1) // creates the first descriptor pool
	s.Barrier()
	allocs := testing.AllocsPerRun(500, func() {
		s.Dispatch(p, bind, pc, 8, 1, 1)
		s.Barrier()
	})
	must(t, s.End())
	if allocs != 0 {
		t.Errorf("Dispatch+Barrier: %v allocations per call, want 0", allocs)
	}
	allocs = testing.AllocsPerRun(20, func() { must(t, s.Run()) })
	if allocs != 0 {
		t.Errorf("Run: %v allocations per call, want 0", allocs)
	}
}

// BenchmarkDispatchRecord measures recording one dispatch (descriptor set
// allocation and update, binds, push constants, vkCmdDispatch), the cost
// paid per op when a sequence is recorded. The validation layer is off, as
// in production.
func BenchmarkDispatchRecord(b *testing.B) {
	d, err := Open(Options{Device: -1, AllowCPU: true})
	needVulkan(b, err)
	defer d.Close()
	p := saxpy(b, d, 64)
	xb, err := d.NewBuffer(4096, false)
	must(b, err)
	bind := []Binding{{Buf: xb}, {Buf: xb}}
	pc := Push(uint32(1024), float32(2))
	b.ReportAllocs()
	s := d.NewSequence()
	for i := 0; b.Loop(); i++ {
		if i%setsPerPool == setsPerPool-1 {
			// Keep the command buffer and pools bounded.
			b.StopTimer()
			must(b, s.reset())
			b.StartTimer()
		}
		s.Dispatch(p, bind, pc, 16, 1, 1)
	}
	must(b, s.End())
}
