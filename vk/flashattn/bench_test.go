package flashattn

import (
	"encoding/binary"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
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
// query-key pair under the causal mask). -window runs the layer as a
// sliding-window one over its ring. Each run is one submission: the
// GPU starts it idle, and the caches hold what the run before left.
// BenchmarkLlama3Layers times decode as a forward pass runs it.
//
//	go test ./vk/flashattn -run '^$' -bench Llama3 -benchtime 20x
var (
	benchSplits = flag.Int("splits", 0, "BenchmarkLlama3: force the split-k count of decode (0: the policy's)")
	benchPSplit = flag.Int("prefill-splits", 0, "BenchmarkLlama3: force the split-k count of prefill (0: the policy's)")
	benchBc     = flag.Int("bc", 0, "BenchmarkLlama3: force the keys per tile, per step of the workgroup in decode (0: the policy's)")
	benchStage  = flag.Int("stage", 0, "BenchmarkLlama3: staging of K and V in shared memory in prefill: 0 the policy's, 1 off, 2 on")
	benchPerWG  = flag.Int("heads", 0, "BenchmarkLlama3: force the q-heads per workgroup (0: the policy's)")
	benchGroups = flag.Int("groups", 0, "BenchmarkLlama3: force the lane groups per decode workgroup (0: the policy's)")
	benchChunk  = flag.Int("chunk", 0, "BenchmarkLlama3: force the f16 values per load in decode, 8 or 4 (0: the policy's)")
	benchWindow = flag.Int("window", 0, "BenchmarkLlama3: a sliding window of this many keys, over a ring cache of window+queries-1 rows (0: global)")
	benchCoop   = flag.Bool("coop", false, "BenchmarkLlama3: prefill on the cooperative-matrix kernel, as the engine chooses it (-br and -stage then do nothing)")
	benchCoopHG = flag.Int("coop-heads", 0, "BenchmarkLlama3 -coop: the q-heads per workgroup to try first (Options.CoopTile; 0: the order's)")
	benchCoopBc = flag.Int("coop-bc", 0, "BenchmarkLlama3 -coop: the keys per tile to try first (Options.CoopTile; 0: the order's)")
)

// The Llama-3-8B attention shape; -kv-heads 4 makes it Qwen3-30B-A3B's
// (32 q-heads over 4 KV heads: 8 q-heads a KV head).
const benchHeads, benchDim = 32, 128

var benchKVHeads = flag.Int("kv-heads", 8, "BenchmarkLlama3, BenchmarkLlama3Layers, BenchmarkKVRead: KV heads of the 32 q-heads (8: Llama-3-8B's, 4: Qwen3-30B-A3B's)")

type benchCase struct {
	kv, queries, wave, br int
	mode                  string
}

func BenchmarkLlama3(b *testing.B) {
	// Its own device without the validation layer, which a GPU machine may
	// not have and which would be measured with the kernel.
	d, err := vk.Open(vk.Options{Device: -1, AllowCPU: true})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	var cases []benchCase
	for _, kv := range []int{8192, 16384} {
		for _, mode := range []struct {
			name    string
			queries int
			brs     []int
		}{{"decode", 1, []int{1}}, {"prefill512", 512, []int{8, 16}}} {
			for _, w := range []int{32, 64} {
				for _, br := range mode.brs {
					cases = append(cases, benchCase{kv, mode.queries, w, br, mode.name})
				}
			}
		}
	}
	// One set of buffers, sized for the largest case, serves every case:
	// allocating and freeing 64 MiB caches per case made later cases run up
	// to 4× slower on an H100 (fresh allocations after many frees), which
	// measured the allocator rather than the kernel.
	io, step, err := benchBuffers(b, d, cases)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range cases {
		name := fmt.Sprintf("kv%d/%s/w%d/br%d", c.kv, c.mode, c.wave, c.br)
		b.Run(name, func(b *testing.B) { benchLlama3(b, d, c, io, step) })
	}
}

func (c benchCase) setup(d *vk.Device) (*FlashAttn, Shape, error) {
	prefs := attention.Prefs{Br: c.br, Bc: *benchBc, Stage: attention.StagePref(*benchStage), Heads: *benchPerWG}
	prefs.Splits = *benchPSplit
	if c.queries == 1 {
		prefs.Splits, prefs.Stage, prefs.Groups, prefs.Chunk = *benchSplits, attention.StageAuto, *benchGroups, *benchChunk // decode never stages
	}
	o := Options{Wave: c.wave, Prefs: prefs, CoopTile: CoopTile{*benchCoopHG, *benchCoopBc}}
	if *benchCoop && c.queries > 1 {
		o.Coop = coopChoice(d.Info())
	}
	fa, err := New(d, o)
	sh := Shape{Queries: c.queries, Heads: benchHeads, KVHeads: *benchKVHeads, HeadDim: benchDim,
		Context: c.kv, Scale: float32(1 / math.Sqrt(benchDim))}
	if w := *benchWindow; w > 0 {
		// The ring a sliding-window layer keeps (backend.Cache.Slots).
		sh.Window, sh.Context = w, min(c.kv, w+c.queries-1)
	}
	return fa, sh, err
}

// benchBuffers allocates q, K, V (random), out and split-k scratch for the
// largest of cases; step is written per case.
func benchBuffers(b *testing.B, d *vk.Device, cases []benchCase) (IO, *vk.Buffer, error) {
	var kv, queries int
	var scratch int64
	for _, c := range cases {
		kv, queries = max(kv, c.kv), max(queries, c.queries)
		fa, sh, err := c.setup(d)
		if err != nil {
			continue // a wave this device cannot run: skipped by its case
		}
		n, err := fa.ScratchBytes(sh)
		fa.Close()
		if err != nil {
			return IO{}, nil, err
		}
		scratch = max(scratch, n)
	}
	r := rand.New(rand.NewPCG(1, 2))
	qv := make([]float32, queries*benchHeads*benchDim)
	for i := range qv {
		qv[i] = float32(2*r.Float64() - 1)
	}
	f16 := func() []byte {
		h := make([]uint16, kv**benchKVHeads*benchDim)
		for i := range h {
			h[i] = float16.Fromfloat32(float32(2*r.Float64() - 1)).Bits()
		}
		return u16Bytes(h)
	}
	io := IO{Q: whole(buffer(b, d, f32Bytes(qv))), K: whole(buffer(b, d, f16())), V: whole(buffer(b, d, f16())),
		Out: whole(buffer(b, d, make([]byte, 4*len(qv))))}
	if scratch > 0 {
		io.Scratch = whole(buffer(b, d, make([]byte, scratch)))
	}
	step := buffer(b, d, make([]byte, 8))
	io.Step = whole(step)
	return io, step, nil
}

func benchLlama3(b *testing.B, d *vk.Device, c benchCase, io IO, step *vk.Buffer) {
	fa, sh, err := c.setup(d)
	if err != nil {
		b.Skip(err) // a wave this device cannot run at all
	}
	defer fa.Close()
	plan, err := fa.Plan(sh)
	if err != nil {
		b.Skip(err) // a forced geometry this shape cannot take (-bc, -heads)
	}
	if err := step.Write(0, binary.LittleEndian.AppendUint32(nil, uint32(c.kv-c.queries))); err != nil {
		b.Fatal(err)
	}
	if plan.Splits == 1 {
		io.Scratch = vk.Binding{}
	}
	if cp, err := fa.CoopPlan(sh); err == nil {
		b.Logf("%v", cp)
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
	perOp := map[string]float64{}
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
			perOp[t.Name] += t.Micros
		}
	}
	b.StopTimer() // the statistics query below is no part of the run
	us := gpu / float64(b.N)
	bytes := 2 * float64(sh.Context) * float64(*benchKVHeads) * benchDim * 2 // every row of the ring
	b.ReportMetric(us, "gpu-µs")
	b.ReportMetric(bytes/us/1e3, "GB/s")
	if c.queries > 1 {
		pairs := 0.0
		for i := range c.queries {
			keys := c.kv - c.queries + i + 1
			if sh.Window > 0 {
				keys = min(keys, sh.Window)
			}
			pairs += float64(keys)
		}
		b.ReportMetric(4*benchDim*benchHeads*pairs/us/1e6, "TFLOP/s")
	}
	ops := ""
	for _, name := range []string{plan.Shader(), "flash_attn_reduce"} {
		if t, ok := perOp[name]; ok {
			ops += fmt.Sprintf(" %s %.1fµs", name, t/float64(b.N))
		}
	}
	b.Logf("%s: %s;%s%s", d.Info().Name, plan, ops, statsNote(fa, sh))
}

// statsNote is " stats: Register Count=128 ..." for the main kernel: the
// numeric statistics the driver reports (register and spill counts first,
// then the driver's order), at most 6 so the line stays one line; empty
// where the device reports none. Registers per lane set occupancy, which
// decides whether decode's split workgroups fill the GPU.
func statsNote(fa *FlashAttn, sh Shape) string {
	stats, err := fa.Statistics(sh, false) // the benchmark's IO has no 8-bit output
	if err != nil {
		return ""
	}
	var first, rest []string
	for _, st := range stats {
		if _, ok := st.Number(); !ok {
			continue
		}
		name := strings.ToLower(st.Name)
		if strings.Contains(name, "register") || strings.Contains(name, "gpr") || strings.Contains(name, "spill") {
			first = append(first, st.String())
		} else {
			rest = append(rest, st.String())
		}
	}
	all := append(first, rest...)
	if len(all) == 0 {
		return ""
	}
	return " stats: " + strings.Join(all[:min(len(all), 6)], ", ")
}
