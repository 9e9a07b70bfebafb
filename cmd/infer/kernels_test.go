package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vkinfer/vkinfer/internal/radvnull"
)

// amdMatrix are the RADV null devices the compile matrix covers, one per
// generation (docs/AMD.md has their table).
var amdMatrix = []struct {
	family, generation string
	rdna               bool // minSubgroupSize 32: flash attention's policy is wave32
}{
	{"polaris10", "GCN4", false}, {"vega10", "GCN5", false}, {"navi10", "RDNA1", true},
	{"navi21", "RDNA2", true}, {"navi31", "RDNA3", true}, {"gfx1200", "RDNA4", true},
}

// spillStats are RADV's statistics that are not zero when ACO spills:
// registers spilled (SGPRs to VGPR lanes, VGPRs to scratch memory) and the
// scratch memory a wave then needs.
var spillStats = []string{"Spilled VGPRs", "Spilled SGPRs", "Scratch size"}

// TestAMDCompileMatrix builds every pipeline of Llama-3-8B (Q4_K_M shapes),
// and those Qwen3-8B and Gemma-3-4B add, with AMD's compiler (ACO, through RADV's null devices) for GCN4 to
// RDNA4: the engine's choices at every wave the device runs; the policy's
// wave on a short prompt (9 tokens: split prefill attention and its merge,
// narrow tiles, rows of 8) with 8-bit and with f32 activations; and the
// plain attention kernel; on RDNA3, the cooperative-matrix products off and
// in their integer variant; with the passes that decode 2 to 4 sequences
// together (--seqs 4, infer serve's default --parallel: the row modes of
// rope, kv_store, the stacked products' epilogue and both attention
// kernels). Not 8: the matrix-vector products over 5 to 8 columns spill
// (docs/AMD.md), in a rows pass as in a prefill of as many tokens. Every pipeline must build without spilling, run
// at the subgroup size it asks for, flash attention's lane groups at their
// own width, RDNA's attention at the policy's wave32 and its matrix-vector
// products at the policy's 64.
func TestAMDCompileMatrix(t *testing.T) {
	runs := []struct {
		model string // a synth: preset; "" is llama3-8b
		args  []string
		// waves: flash attention's lane groups on RDNA (GCN runs 64
		// alone); none with the plain kernel.
		waves []int
	}{
		{"", []string{"--seqs", "4"}, []int{32, 64}},
		// A short prompt past the matrix-vector kernels' batches
		// (kernels.DefaultMatVecBatch) takes the prefill products; one
		// within them, on RDNA2 and later, the 8-bit matrix-vector
		// kernel in groups of columns (GCN and RDNA1 keep the prefill
		// products, where those groups would spill).
		{"", []string{"--wave", "auto", "-u", "33", "--int-dot", "on"}, []int{32}},
		{"", []string{"--wave", "auto", "-u", "17", "--int-dot", "on", "--coopmat", "off"}, []int{32}},
		{"", []string{"--wave", "auto", "-u", "9", "--int-dot", "off", "--seqs", "4"}, []int{32}},
		{"", []string{"--wave", "auto", "--int-dot", "on"}, []int{32}},
		// A short context: decode attention does not split and writes its
		// output's 8-bit copy itself.
		{"", []string{"-c", "64", "--int-dot", "on"}, []int{32, 64}},
		{"", []string{"--int-dot", "off", "--flash-attn=false", "--seqs", "4"}, nil},
		// RDNA3 takes cooperative matrices by default; its scalar prefill
		// products must build too.
		{"", []string{"--wave", "auto", "--coopmat", "off"}, []int{32}},
		// The products' integer variant (int8 fragments), where the
		// device has cooperative matrices (other families refuse it).
		{"", []string{"--wave", "auto", "--coopmat", "int8", "--int-dot", "on"}, []int{32}},
		// Narrow batches on matvec_coopmat (RDNA3; a plain pass elsewhere),
		// with and without the residual, over three 16-column fragments.
		{"", []string{"--wave", "auto", "-u", "33", "--narrow-coop", "on", "--int-dot", "on"}, []int{32}},
		// Issue 18's kernels: Qwen3's per-head norms (head dim 128);
		// Gemma 3's GeGLU, embedding scale, head dim 256 and sliding
		// windows, also with the policy's wave on a short prompt.
		{"qwen3-8b", []string{"--int-dot", "on", "--seqs", "4"}, []int{32, 64}},
		{"gemma3-4b", []string{"--int-dot", "on", "--seqs", "4"}, []int{32, 64}},
		{"gemma3-4b", []string{"--wave", "auto", "-u", "9", "--int-dot", "off"}, []int{32}},
		// Issue 19's experts: matvec_id in decode; in prefill moe_sort and
		// the gathered products (matmul_coopmat_id on RDNA3, matmul_q8_id
		// elsewhere).
		{"qwen3-30b-a3b", []string{"--int-dot", "on"}, []int{32, 64}},
	}
	for _, g := range amdMatrix {
		t.Run(g.family, func(t *testing.T) {
			t.Parallel()
			// A private cache: no pipeline cache or tuning profile of an
			// earlier run, and every pipeline compiled.
			env := append(radvnull.Env(t, g.family), "XDG_CACHE_HOME="+t.TempDir())
			t0 := time.Now()
			count := 0
			// Mesa 25.0 offers cooperative matrices on RDNA3 alone.
			hasCoop := g.family == "navi31"
			for _, run := range runs {
				coopArg := "auto" // --coopmat's value
				if i := slices.Index(run.args, "--coopmat"); i >= 0 {
					coopArg = run.args[i+1]
				}
				int8 := coopArg == "int8"
				if int8 && !hasCoop {
					continue
				}
				model := cmp.Or(run.model, "llama3-8b")
				args := append([]string{"kernels", "-m", "synth:" + model, "-o", "json"}, run.args...)
				r := inferEnv(t, env, args...)
				var reports []kernelReport
				if err := json.Unmarshal([]byte(r.stdout), &reports); err != nil || len(reports) == 0 {
					t.Fatalf("%v: exit %d, %d pipelines (%v)\n%s", args[1:], r.code, len(reports), err, r.stderr)
				}
				if r.code != 0 {
					t.Errorf("%v: exit %d: %s", args[1:], r.code, lastLine(r.stderr))
				}
				waves := run.waves
				if !g.rdna && waves != nil {
					waves = []int{64}
				}
				for _, p := range reports {
					if problem := amdProblem(p); problem != "" {
						t.Errorf("%v: %s: %s", args[1:], p.Name, problem)
					}
				}
				// Where cooperative matrices are on, prefill attention
				// takes them too, where the batch is long enough (at
				// least 16 rows: -u 9 is not), and no lane group.
				wantCoop := hasCoop && coopArg != "off"
				coopFA := slices.ContainsFunc(reports, func(p kernelReport) bool { return strings.Contains(p.Name, "flash_attn_coopmat") })
				long := true
				if i := slices.Index(run.args, "-u"); i >= 0 {
					u, _ := strconv.Atoi(run.args[i+1])
					long = u >= 16
				}
				if want := wantCoop && long && !slices.Contains(run.args, "--flash-attn=false"); coopFA != want {
					t.Errorf("%v: flash_attn_coopmat pipelines %v, want %v", args[1:], coopFA, want)
				}
				rows := slices.Contains(run.args, "--seqs")
				for _, kind := range []string{"decode", "rows", "prefill"} {
					want := waves
					if kind == "prefill" && coopFA || kind == "rows" && !rows {
						want = nil
					}
					if got := attentionWaves(reports, kind); !slices.Equal(got, want) {
						t.Errorf("%v: %s flash attention at waves %v, want %v", args[1:], kind, got, want)
					}
				}
				// The matrix-vector products at the policy's wave: RDNA pins
				// 64 (attention.MatVecWave), GCN runs its only size; both
				// sizes on RDNA where kernels lists every wave.
				mvWant, mvPinned := []int{64}, g.rdna
				if g.rdna && slices.Equal(run.waves, []int{32, 64}) {
					mvWant = []int{32, 64}
				}
				if got := matVecWaves(reports, mvPinned); !slices.Equal(got, mvWant) {
					t.Errorf("%v: matrix-vector products on subgroups of %v, want %v (pinned: %v)", args[1:], got, mvWant, mvPinned)
				}
				if plainRows := slices.ContainsFunc(reports, func(p kernelReport) bool { return p.Kind == "rows" && p.Shader == "causal_attn" }); plainRows != (rows && waves == nil) {
					t.Errorf("%v: the plain attention kernel in a rows pass %v", args[1:], plainRows)
				}
				// --narrow-coop sends a 33-token prompt's products to
				// matvec_coopmat instead.
				kernel := "matmul_coopmat"
				if slices.Contains(run.args, "--narrow-coop") {
					kernel = "matvec_coopmat"
				}
				coop := slices.ContainsFunc(reports, func(p kernelReport) bool { return strings.Contains(p.Name, kernel) })
				if coop != wantCoop {
					t.Errorf("%v: %s pipelines %v, want %v", args[1:], kernel, coop, wantCoop)
				}
				i8 := slices.ContainsFunc(reports, func(p kernelReport) bool { return strings.Contains(p.Name, "matmul_coopmat_i8") })
				if i8 != int8 {
					t.Errorf("%v: matmul_coopmat_i8 pipelines %v, want %v", args[1:], i8, int8)
				}
				if slices.Equal(run.args[:2], []string{"-c", "64"}) {
					unsplit := slices.ContainsFunc(reports, func(p kernelReport) bool {
						return p.Kind == "decode" && strings.Contains(p.Name, "splits=1") && strings.HasSuffix(p.Name, "+q8")
					})
					if !unsplit {
						t.Errorf("%v: no unsplit decode attention with its own 8-bit output", args[1:])
					}
				}
				count += len(reports)
			}
			t.Logf("%s (%s): %d pipelines in %d runs, %.1f s", g.family, g.generation, count, len(runs), time.Since(t0).Seconds())
		})
	}
}

// amdProblem says what is wrong with a pipeline on an AMD null device, ""
// when nothing is.
func amdProblem(p kernelReport) string {
	if p.Error != "" {
		return "did not build: " + p.Error
	}
	for _, name := range spillStats {
		v, ok := p.Stats[name].(float64) // JSON numbers
		switch {
		case !ok:
			return fmt.Sprintf("no %q statistic (stats %v)", name, p.Stats)
		case v != 0:
			return fmt.Sprintf("spills: %s = %v", name, v)
		}
	}
	switch {
	case p.RequestedSubgroup != 0 && p.Subgroup != p.RequestedSubgroup:
		return fmt.Sprintf("asked for subgroups of %d, compiled for %d", p.RequestedSubgroup, p.Subgroup)
	case p.Wave != 0 && p.Subgroup != p.Wave:
		// Every AMD generation runs its waves natively: RDNA by asking
		// for 32 or 64, GCN at its only size, 64.
		return fmt.Sprintf("a lane group of %d on subgroups of %d", p.Wave, p.Subgroup)
	}
	return ""
}

// attentionWaves lists the lane groups of the flash-attention pipelines of
// a kind (decode, rows or prefill), narrowest first.
func attentionWaves(reports []kernelReport, kind string) []int {
	var waves []int
	for _, p := range reports {
		if p.Kind == kind && p.Wave != 0 && !slices.Contains(waves, p.Wave) {
			waves = append(waves, p.Wave)
		}
	}
	slices.Sort(waves)
	return waves
}

// matVecWaves lists the subgroup sizes the matrix-vector pipelines
// (matvec, matvec_q8, matvec_stack) were compiled for, narrowest first; a
// pipeline whose requirement disagrees with pinned (required or not)
// counts as 0.
func matVecWaves(reports []kernelReport, pinned bool) []int {
	var waves []int
	for _, p := range reports {
		if !strings.HasPrefix(p.Shader, "matvec") {
			continue
		}
		w := p.Subgroup
		if (p.RequestedSubgroup != 0) != pinned {
			w = 0
		}
		if !slices.Contains(waves, w) {
			waves = append(waves, w)
		}
	}
	slices.Sort(waves)
	return waves
}

// TestAMDProblem: each failure the matrix looks for is caught.
func TestAMDProblem(t *testing.T) {
	clean := map[string]any{"Spilled VGPRs": 0.0, "Spilled SGPRs": 0.0, "Scratch size": 0.0}
	with := func(k string, v float64) map[string]any {
		m := maps.Clone(clean)
		m[k] = v
		return m
	}
	for _, c := range []struct {
		p    kernelReport
		want string
	}{
		{kernelReport{Stats: clean, Subgroup: 64}, ""},
		{kernelReport{Stats: clean, Wave: 32, RequestedSubgroup: 32, Subgroup: 32}, ""},
		{kernelReport{Error: "vk: boom"}, "did not build"},
		{kernelReport{Stats: with("Spilled VGPRs", 4)}, "spills"},
		{kernelReport{Stats: with("Scratch size", 256)}, "spills"},
		{kernelReport{Stats: map[string]any{}}, "no \"Spilled VGPRs\" statistic"},
		{kernelReport{Stats: clean, RequestedSubgroup: 32, Subgroup: 64}, "asked for subgroups of 32"},
		{kernelReport{Stats: clean, Wave: 32, Subgroup: 64}, "a lane group of 32"},
	} {
		got := amdProblem(c.p)
		if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
			t.Errorf("%+v: %q, want %q", c.p, got, c.want)
		}
	}
}

// TestKernels lists Llama-style pipelines on the machine's device (lavapipe
// in CI, which reports no statistics) in both formats, and refuses bad
// input with one error line.
func TestKernels(t *testing.T) {
	r := infer(t, "kernels", "-m", "synth:tiny-qwen2", "-o", "json")
	var reports []kernelReport
	if err := json.Unmarshal([]byte(r.stdout), &reports); err != nil || r.code != 0 {
		t.Fatalf("exit %d (%v)\n%s", r.code, err, r.stderr)
	}
	kinds := map[string]int{}
	for _, p := range reports {
		if p.Name != p.Kind+" "+p.Op || p.Shader == "" || p.Error != "" || p.Workgroup == 0 {
			t.Errorf("entry %+v", p)
		}
		kinds[p.Kind]++
	}
	if kinds["decode"] == 0 || kinds["prefill"] == 0 || len(kinds) != 2 {
		t.Errorf("pipelines by kind: %v", kinds)
	}
	for _, kind := range []string{"decode", "prefill"} {
		if len(attentionWaves(reports, kind)) == 0 {
			t.Errorf("no %s flash attention", kind)
		}
	}
	// --seqs 3 adds the rows passes of 2 and 3 sequences, with decode's
	// attention in its row mode.
	r = infer(t, "kernels", "-m", "synth:tiny-qwen2", "-o", "json", "--seqs", "3")
	var withRows []kernelReport
	if err := json.Unmarshal([]byte(r.stdout), &withRows); err != nil || r.code != 0 {
		t.Fatalf("--seqs 3: exit %d (%v)\n%s", r.code, err, r.stderr)
	}
	for _, n := range []string{", 2 seqs", ", 3 seqs"} {
		if !slices.ContainsFunc(withRows, func(p kernelReport) bool {
			return p.Kind == "rows" && p.Shader == "flash_attn_decode" && strings.HasSuffix(p.Op, n)
		}) {
			t.Errorf("--seqs 3: no rows pass attention ending %q", n)
		}
	}
	table := infer(t, "kernels", "-m", "synth:tiny-qwen2")
	if lines := strings.Count(table.stdout, "\n"); table.code != 0 || lines != len(reports)+2 ||
		!strings.HasPrefix(table.stdout, "| kind ") {
		t.Errorf("table: exit %d, %d lines for %d pipelines:\n%s%s", table.code, lines, len(reports), table.stdout, table.stderr)
	}

	bad := filepath.Join(t.TempDir(), "bad.gguf")
	if err := os.WriteFile(bad, []byte("GGUF not really"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "no model given"},
		{[]string{"-m", "synth:nope"}, "unknown preset"},
		{[]string{"-m", bad}, "gguf"},
		{[]string{"-m", "synth:tiny", "-o", "md"}, `-o "md"`},
		{[]string{"-m", "synth:tiny", "--wave", "48"}, "--wave"},
		{[]string{"-m", "synth:tiny", "--seqs", "0"}, "--seqs"},
		{[]string{"-m", "synth:tiny", "extra"}, "unexpected argument"},
	} {
		r := infer(t, append([]string{"kernels"}, c.args...)...)
		if last := lastLine(r.stderr); r.code != 1 || !strings.HasPrefix(last, "error: ") || !strings.Contains(last, c.want) ||
			strings.Count(r.stderr, "error:") != 1 {
			t.Errorf("%v: exit %d, stderr %q; want one error line naming %q", c.args, r.code, r.stderr, c.want)
		}
	}
}
