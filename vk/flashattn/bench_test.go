package flashattn

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/x448/float16"

	"github.com/vkinfer/vkinfer/attention"
	"github.com/vkinfer/vkinfer/vk"
)

// BenchmarkLlama3 times one layer of Llama-3-8B attention (32 q-heads, 8 KV
// heads, head dim 128, f16 KV cache) at KV lengths 8192 and 16384: decode
// (one query at position kv-1, Br 1 with the 4 q-heads of a KV head in one
// workgroup, split-k by the policy) and a 512-query prefill ending at kv (Br
// 8 and 16), for wave 32 and 64. It reports the GPU time of the attention
// dispatches (gpu-µs, from timestamps; wall time per run when the device has
// none), the KV cache bytes read per second (GB/s: K and V rows 0..kv-1, each
// once) and, for prefill, the arithmetic rate (TFLOP/s, 4·head dim per
// query-key pair under the causal mask).
//
//	go test ./vk/flashattn -run '^$' -bench Llama3 -benchtime 20x
func BenchmarkLlama3(b *testing.B) {
	d := setup(b)
	for _, kv := range []int{8192, 16384} {
		for _, mode := range []struct {
			name    string
			queries int
			brs     []int
		}{{"decode", 1, []int{1}}, {"prefill512", 512, []int{8, 16}}} {
			for _, w := range []int{32, 64} {
				for _, br := range mode.brs {
					name := fmt.Sprintf("kv%d/%s/w%d/br%d", kv, mode.name, w, br)
					b.Run(name, func(b *testing.B) { benchLlama3(b, d, kv, mode.queries, w, br) })
				}
			}
		}
	}
}

func benchLlama3(b *testing.B, d *vk.Device, kv, queries, wave, br int) {
	const heads, kvHeads, dim = 32, 8, 128
	fa, err := New(d, Options{Wave: wave, Prefs: attention.Prefs{Br: br}})
	if err != nil {
		b.Skip(err) // a wave this device cannot run at all
	}
	defer fa.Close()
	sh := Shape{Queries: queries, Heads: heads, KVHeads: kvHeads, HeadDim: dim, Context: kv,
		Scale: float32(1 / math.Sqrt(dim))}
	plan, err := fa.Plan(sh)
	if err != nil {
		b.Fatal(err)
	}

	r := rand.New(rand.NewPCG(1, 2))
	qv := make([]float32, queries*heads*dim)
	for i := range qv {
		qv[i] = float32(2*r.Float64() - 1)
	}
	cache := make([]uint16, kv*kvHeads*dim)
	for i := range cache {
		cache[i] = float16.Fromfloat32(float32(2*r.Float64() - 1)).Bits()
	}
	io := IO{Q: whole(buffer(b, d, f32Bytes(qv))), K: whole(buffer(b, d, u16Bytes(cache))),
		V: whole(buffer(b, d, u16Bytes(cache))), Out: whole(buffer(b, d, make([]byte, 4*len(qv)))),
		Step: whole(buffer(b, d, binary.LittleEndian.AppendUint32(nil, uint32(kv-queries))))}
	if n, err := fa.ScratchBytes(sh); err != nil {
		b.Fatal(err)
	} else if n > 0 {
		io.Scratch = whole(buffer(b, d, make([]byte, n)))
	}

	timed := d.Info().TimestampValid
	d.SetProfiling(timed)
	defer d.SetProfiling(false)
	s := d.NewSequence()
	defer s.Free()
	if err := fa.Record(s, io, sh); err != nil {
		b.Fatal(err)
	}
	if err := s.End(); err != nil {
		b.Fatal(err)
	}
	if err := s.Run(); err != nil { // warm-up: pipelines, caches, clocks
		b.Fatal(err)
	}
	var gpu float64 // µs
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		if err := s.Run(); err != nil {
			b.Fatal(err)
		}
		if !timed {
			gpu += float64(time.Since(start).Microseconds())
			continue
		}
		for _, t := range s.Timings() {
			gpu += t.Micros
		}
	}
	us := gpu / float64(b.N)
	bytes := 2 * float64(kv) * kvHeads * dim * 2
	b.ReportMetric(us, "gpu-µs")
	b.ReportMetric(bytes/us/1e3, "GB/s")
	if queries > 1 {
		pairs := 0.0
		for i := range queries {
			pairs += float64(kv - queries + i + 1)
		}
		b.ReportMetric(4*dim*heads*pairs/us/1e6, "TFLOP/s")
	}
	b.Logf("%s: %s", d.Info().Name, plan)
}
