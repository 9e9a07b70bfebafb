package flashattn

import (
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/x448/float16"

	"github.com/vkinfer/vkinfer/shaders"
	"github.com/vkinfer/vkinfer/vk"
)

var (
	benchLayers = flag.Int("layers", 32, "BenchmarkLlama3Layers: layers in the run, each with its own KV cache (32: Llama-3-8B's)")
	benchKVs    = flag.String("kvs", "256,8192,16384", "BenchmarkLlama3Layers: the KV lengths, comma-separated, at most 16384")
)

// BenchmarkLlama3Layers times decode attention as a forward pass runs it:
// one dispatch per layer for -layers layers, each layer with its own K and
// V caches (so none finds the one before it in the L2 cache), a barrier
// after each (the next op reads its output), all in one submission, with
// timestamps only before the first layer and after the last. BenchmarkLlama3
// times one dispatch per submission instead, with stamps around it: each of
// its runs starts on an idle GPU and pays the whole launch (2 µs on the H200
// for an empty kernel), and its 64 MiB at KV 16384 partly hit in the 50 MiB
// L2 left by the run before. Here a layer pays what it pays inside a token.
// The same run of bench_read dispatches over the same caches (2 workgroups
// of 256 lanes per compute unit, 2 loads of K and V in flight per lane,
// BenchmarkKVRead's best on the H200) is the floor.
//
// Metrics: gpu-µs, the run's GPU span per layer (barriers and the ramps
// between layers included); GB/s, a layer's K and V bytes per gpu-µs.
//
//	go test ./vk/flashattn -run '^$' -bench Llama3Layers -benchtime 50x
func BenchmarkLlama3Layers(b *testing.B) {
	d, err := vk.Open(vk.Options{Device: -1, AllowCPU: true})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	if !d.Info().TimestampValid {
		b.Skip("the device has no timestamps: a run's span cannot be measured")
	}
	layers := max(*benchLayers, 1)
	const maxKV = 16384
	var kvs []int
	for _, f := range strings.Split(*benchKVs, ",") {
		kv, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || kv < 1 || kv > maxKV {
			b.Fatalf("-kvs: %q is not a KV length of 1 to %d", f, maxKV)
		}
		kvs = append(kvs, kv)
	}
	cache := int64(2 * maxKV * *benchKVHeads * benchDim) // f16 bytes of a layer's K, and of its V
	r := rand.New(rand.NewPCG(3, 4))
	h := make([]uint16, cache/2)
	for i := range h {
		h[i] = float16.Fromfloat32(float32(2*r.Float64() - 1)).Bits()
	}
	data := u16Bytes(h)
	ks, vs := make([]*vk.Buffer, layers), make([]*vk.Buffer, layers)
	for l := range layers {
		// The same values in every layer; the layers differ in where
		// they lie, which is what the caches see.
		ks[l], vs[l] = buffer(b, d, data), buffer(b, d, data)
	}
	qv := make([]float32, benchHeads*benchDim)
	for i := range qv {
		qv[i] = float32(2*r.Float64() - 1)
	}
	q := whole(buffer(b, d, f32Bytes(qv)))
	out := whole(buffer(b, d, make([]byte, 4*len(qv))))
	step := buffer(b, d, make([]byte, 8))

	// 256 (the default's first): the context of a tg128 at depth 0 in infer
	// bench, whose tokens pay this layer cost at every depth (the rest is
	// what depth adds).
	for _, kv := range kvs {
		bytes := 2 * float64(kv) * float64(*benchKVHeads) * benchDim * 2
		for _, w := range []int{32, 64} {
			b.Run(fmt.Sprintf("kv%d/decode/w%d", kv, w), func(b *testing.B) {
				c := benchCase{kv: kv, queries: 1, wave: w, br: 1, mode: "decode"}
				fa, sh, err := c.setup(d)
				if err != nil {
					b.Skip(err) // a wave this device cannot run at all
				}
				defer fa.Close()
				n, err := fa.ScratchBytes(sh)
				if err != nil {
					b.Skip(err) // a forced geometry this shape cannot take (-bc, -heads)
				}
				io := IO{Q: q, Out: out, Step: whole(step)}
				if n > 0 {
					io.Scratch = whole(buffer(b, d, make([]byte, n)))
				}
				if err := step.Write(0, binary.LittleEndian.AppendUint32(nil, uint32(kv-1))); err != nil {
					b.Fatal(err)
				}
				runLayers(b, d, layers, bytes, func(s *vk.Sequence, l int) error {
					io.K, io.V = whole(ks[l]), whole(vs[l])
					return fa.Record(s, io, sh)
				})
			})
		}
		b.Run(fmt.Sprintf("kv%d/read", kv), func(b *testing.B) {
			p, err := d.Pipeline(vk.PipelineSpec{Name: "bench_read", SPIRV: shaders.SPIRV("bench_read"),
				Bindings: 3, PushSize: 4, Spec: []uint32{256, 2}})
			if err != nil {
				b.Fatal(err)
			}
			half := int64(bytes / 2)
			groups := uint32(2 * max(d.Info().ComputeUnits, 1))
			runLayers(b, d, layers, bytes, func(s *vk.Sequence, l int) error {
				s.Dispatch(p, []vk.Binding{{Buf: ks[l], Size: half}, {Buf: vs[l], Size: half}, out}, vk.Push(uint32(half/16)), groups, 1, 1)
				return nil
			})
		})
	}
}

// runLayers records record(s, l) for each of the layers with a barrier after
// each, the first and last layers' dispatches stamped, runs the sequence
// b.N times after a warm-up and reports the metrics BenchmarkLlama3Layers
// describes.
func runLayers(b *testing.B, d *vk.Device, layers int, bytes float64, record func(s *vk.Sequence, l int) error) {
	defer d.SetProfiling(false)
	s := d.NewSequence()
	defer s.Free()
	for l := range layers {
		// Stamps around every dispatch would add their own waits to each
		// layer; the span needs only the ends.
		d.SetProfiling(l == 0 || l == layers-1)
		if err := record(s, l); err != nil {
			b.Fatal(err)
		}
		s.Barrier()
	}
	if err := s.End(); err != nil {
		b.Fatal(err)
	}
	if err := s.Run(); err != nil { // warm-up: pipelines, caches, clocks
		b.Fatal(err)
	}
	var span float64
	b.ResetTimer()
	for range b.N {
		if err := s.Run(); err != nil {
			b.Fatal(err)
		}
		ts := s.Timings()
		if len(ts) == 0 {
			b.Fatal("no timings")
		}
		last := ts[len(ts)-1]
		span += last.Start + last.Micros
	}
	b.StopTimer()
	us := span / float64(b.N*layers)
	b.ReportMetric(us, "gpu-µs")
	b.ReportMetric(bytes/us/1e3, "GB/s")
}
