package flashattn

import (
	"fmt"
	"testing"

	"github.com/vkinfer/vkinfer/shaders"
	"github.com/vkinfer/vkinfer/vk"
)

// BenchmarkKVRead times the floor BenchmarkLlama3's decode is held to: one
// dispatch reading a Llama-3-8B layer's K and V caches (KV 8192 and 16384:
// 32 and 64 MiB) with nothing else to do (shaders/glsl/bench_read.comp), at
// a few grid sizes and loads in flight per lane: 2 workgroups of 256 lanes
// per compute unit with 1 to 8 loads each of K and V is 16 to 128 KiB in
// flight per compute unit, the range the attention kernels work in. It is timed as
// BenchmarkLlama3 times attention, one submission per run with timestamps
// around the dispatch, so the two compare like for like: the ramp-up and
// drain of a single dispatch count in both.
//
//	go test ./vk/flashattn -run '^$' -bench KVRead -benchtime 50x
func BenchmarkKVRead(b *testing.B) {
	d, err := vk.Open(vk.Options{Device: -1, AllowCPU: true})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	const lanes = 256
	cus := max(d.Info().ComputeUnits, 1)
	for _, kv := range []int{8192, 16384} {
		size := int64(2 * kv * *benchKVHeads * benchDim) // f16 bytes of K, and of V
		k, err := d.NewBuffer(size, false)
		if err != nil {
			b.Fatal(err)
		}
		v, err := d.NewBuffer(size, false)
		if err != nil {
			b.Fatal(err)
		}
		sink, err := d.NewBuffer(16*int64(16*cus), false)
		if err != nil {
			b.Fatal(err)
		}
		for _, perCU := range []int{2, 4, 8, 16} {
			for _, items := range []uint32{1, 2, 4, 8} {
				name := fmt.Sprintf("kv%d/wg%dx%d/items%d", kv, perCU, cus, items)
				b.Run(name, func(b *testing.B) {
					p, err := d.Pipeline(vk.PipelineSpec{Name: "bench_read", SPIRV: shaders.SPIRV("bench_read"),
						Bindings: 3, PushSize: 4, Spec: []uint32{lanes, items}})
					if err != nil {
						b.Fatal(err)
					}
					timed := d.Info().TimestampValid
					d.SetProfiling(timed)
					defer d.SetProfiling(false)
					s := d.NewSequence()
					defer s.Free()
					s.Dispatch(p, []vk.Binding{{Buf: k}, {Buf: v}, {Buf: sink}}, vk.Push(uint32(size/16)), uint32(perCU*cus), 1, 1)
					if err := s.End(); err != nil {
						b.Fatal(err)
					}
					if err := s.Run(); err != nil { // warm-up
						b.Fatal(err)
					}
					var us float64
					b.ResetTimer()
					for range b.N {
						if err := s.Run(); err != nil {
							b.Fatal(err)
						}
						for _, t := range s.Timings() {
							us += t.Micros
						}
					}
					us /= float64(b.N)
					b.ReportMetric(us, "gpu-µs")
					b.ReportMetric(float64(2*size)/us/1e3, "GB/s")
				})
			}
		}
		k.Free()
		v.Free()
		sink.Free()
	}
}
