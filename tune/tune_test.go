package tune

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/vkinfer/vkinfer/attention"
	"github.com/vkinfer/vkinfer/coopmat"
	"github.com/vkinfer/vkinfer/internal/vktest"
	"github.com/vkinfer/vkinfer/quant"
	"github.com/vkinfer/vkinfer/vk"
	"github.com/vkinfer/vkinfer/vk/flashattn"
	"github.com/vkinfer/vkinfer/vk/kernels"
)

// open returns a new validated device (lavapipe in CI); any validation
// message fails the test.
func open(t *testing.T) *vk.Device { return vktest.Open(t) }

// tiny is a model small enough for lavapipe: one odd-sized Q4_K matrix of
// two superblocks per row, and a GQA attention shape.
var tiny = Model{Name: "tiny", Heads: 4, KVHeads: 2, HeadDim: 32,
	Matrices: []Matrix{{Rows: 37, K: 512, Type: quant.Q4_K, Count: 1, Names: []string{"w"}}}}

// wrong records a kernel that computes something else: it reads the
// matrix as if rows were shorter (shortK), so every output is a different
// dot product; silent records nothing at all, so the output keeps
// whatever the buffer held.
var (
	wrong = matVariant{name: "wrong K", rec: func(k *kernels.Kernels, s *vk.Sequence, dst, w, x vk.Binding, t quant.Type, n, rows, K int) error {
		return k.MatMulTiled(s, dst, w, x, t, n, rows, shortK(t, K), kernels.Tile{BM: 16, BN: 16, TM: 1, TN: 1})
	}}
	silent = matVariant{name: "silent", rec: func(*kernels.Kernels, *vk.Sequence, vk.Binding, vk.Binding, vk.Binding, quant.Type, int, int, int) error {
		return nil
	}}
	wrongVec = matVariant{name: "wrong K", rec: func(k *kernels.Kernels, s *vk.Sequence, dst, w, x vk.Binding, t quant.Type, n, rows, K int) error {
		return k.MatVecWith(s, dst, w, x, t, n, rows, shortK(t, K), kernels.MatVecShape{Lanes: 32, Rows: 1, Unroll: 1})
	}}
	wrongQ8 = matVariant{name: "wrong K", rec: func(k *kernels.Kernels, s *vk.Sequence, dst, w, xq vk.Binding, t quant.Type, n, rows, K int) error {
		return k.MatMulQ8(s, dst, w, xq, t, n, rows, shortK(t, K), kernels.Tile{BM: 32, BN: 32, TM: 4, TN: 4})
	}}
	wrongVecQ8 = matVariant{name: "wrong K", rec: func(k *kernels.Kernels, s *vk.Sequence, dst, w, xq vk.Binding, t quant.Type, n, rows, K int) error {
		return k.MatVecQ8With(s, dst, w, xq, nil, t, n, rows, shortK(t, K), kernels.MatVecShape{Lanes: 32, Rows: 1, Unroll: 1})
	}}
)

// shortK is a wrong row length for weights of type t: one block fewer, or
// 32 values fewer for float weights, a length every kernel accepts.
func shortK(t quant.Type, K int) int { return K - max(t.BlockSize(), 32) }

// mixed is tiny with an F16 matrix too, which the f32 kernels take and
// the q8 ones leave out.
var mixed = Model{Name: "mixed", Heads: tiny.Heads, KVHeads: tiny.KVHeads, HeadDim: tiny.HeadDim,
	Matrices: append(slices.Clone(tiny.Matrices), Matrix{Rows: 19, K: 64, Type: quant.F16, Count: 2, Names: []string{"f"}})}

// TestSweep runs a tiny sweep of every kernel end to end: every honest
// variant passes parity, the planted wrong ones are measured, rejected and
// never chosen, a decode Bc the plan rejects is reported as not run, and
// the profile holds winners that were measured. lavapipe exposes integer
// dot products (emulated), so the q8 kernels run here too: their parity
// holds to f32 rounding only against the activations as the device rounded
// them, which shows the reference uses those.
func TestSweep(t *testing.T) {
	d := open(t)
	if !d.Info().IntegerDot {
		t.Fatal("the test device lacks integer dot products: the q8 sweeps would not run")
	}
	tiles := []kernels.Tile{{BM: 16, BN: 16, TM: 1, TN: 1}, {BM: 8, BN: 32, TM: 1, TN: 1}}
	tilesQ8 := []kernels.Tile{{BM: 32, BN: 32, TM: 4, TN: 4}, {BM: 16, BN: 64, TM: 2, TN: 8, KB: 32}}
	rejected := Attention{Bc: 12}       // no wave's key slots times a power of two
	staged := Attention{Stage: StageOn} // decode never stages
	o := Options{Reps: 2, Tiles: tiles, MatVecs: []kernels.MatVecShape{{Lanes: 32, Rows: 3, Unroll: 1}},
		TilesQ8: tilesQ8, MatVecsQ8: []kernels.MatVecShape{{Lanes: 32, Rows: 3, Unroll: 2}},
		Decode: []Attention{{Bc: 64, Splits: 1}, rejected, staged}, Prefill: []Attention{{Br: 8, Bc: 16}},
		KVLens: []int{40}, Columns: 9, Queries: 9,
		extra: map[string][]matVariant{KernelMatMul: {wrong, silent}, KernelMatVec: {wrongVec},
			KernelMatMulQ8: {wrongQ8, silent}, KernelMatVecQ8: {wrongVecQ8}}}
	var log bytes.Buffer
	o.Log = &log
	r, err := Sweep(d, mixed, o)
	if err != nil {
		t.Fatal(err)
	}
	k := kernels.New(d)
	defer k.Close()
	kinds := map[string]int{}
	for _, tb := range r.Tables {
		kinds[tb.Kernel]++
		winners := 0
		for _, c := range tb.Cells {
			planted := c.Variant == wrong.name || c.Variant == silent.name
			switch {
			case c.Variant == rejected.String() || c.Variant == staged.String():
				if c.OK() || c.Status == StatusParity || c.Winner {
					t.Errorf("%s %s: a geometry the plan rejects ran: %+v", tb.Kernel, c.Variant, c)
				}
				continue
			case planted && c.Status != StatusParity:
				t.Errorf("%s %s: planted wrong variant has status %q (error %g, bound %g)", tb.Kernel, c.Variant, c.Status, c.MaxErr, c.Bound)
			case planted && !(c.MaxErr > 10*c.Bound):
				t.Errorf("%s %s: error %g is not far above the bound %g", tb.Kernel, c.Variant, c.MaxErr, c.Bound)
			case !planted && (!c.OK() || c.Millis <= 0 || c.Rate <= 0):
				t.Errorf("%s %s: %+v", tb.Kernel, c.Variant, c)
			case !planted && !(c.MaxErr <= c.Bound):
				t.Errorf("%s %s: error %g over bound %g", tb.Kernel, c.Variant, c.MaxErr, c.Bound)
			}
			if c.Winner {
				winners++
				if planted {
					t.Errorf("%s: the wrong variant %s won", tb.Kernel, c.Variant)
				}
			}
			// The default matvec_q8 shape leaves its lanes to the
			// matrix, and its cells say what it took.
			if tb.Kernel == KernelMatVecQ8 && c.Default {
				m := tiny.Matrices[0]
				if want := fmt.Sprintf("%v (%v)", k.MatVecQ8, k.MatVecQ8For(m.Rows, m.K)); c.Variant != want {
					t.Errorf("matvec_q8 default cell %q, want %q", c.Variant, want)
				}
			}
		}
		if winners != 1 {
			t.Errorf("%s %s: %d winners", tb.Kernel, tb.Shape, winners)
		}
	}
	want := map[string]int{KernelMatMul: 2, KernelMatVec: 2, KernelMatMulQ8: 1, KernelMatVecQ8: 1, "decode attention": 1, "prefill attention": 1}
	for k, n := range want {
		if kinds[k] != n {
			t.Errorf("%d %s tables, want %d (all: %v)", kinds[k], k, n, kinds)
		}
	}
	for _, kernel := range []string{KernelMatMulQ8, KernelMatVecQ8} {
		if !slices.ContainsFunc(r.Notes, func(n string) bool { return strings.HasPrefix(n, kernel+": 19x64 F16") }) {
			t.Errorf("no note that %s left the F16 matrix out: %q", kernel, r.Notes)
		}
	}
	p := r.Profile
	if p.MatMul == nil || p.MatVec == nil || p.MatMulQ8 == nil || p.MatVecQ8 == nil || p.Decode == nil || p.Prefill == nil || len(r.Unchosen) > 0 {
		t.Fatalf("profile %s, unchosen %v", p, r.Unchosen)
	}
	if tile := p.MatMul.Tile(); tile != tiles[0] && tile != tiles[1] && tile != k.Tile {
		t.Errorf("chosen tile %v was not swept", tile)
	}
	if tile := p.MatMulQ8.Tile(); !slices.Contains(append(tilesQ8, k.TileQ8), tile) {
		t.Errorf("chosen matmul_q8 tile %v was not swept", tile)
	}
	if sh := p.MatVecQ8.Shape(); sh != k.MatVecQ8 && sh != o.MatVecsQ8[0] {
		t.Errorf("chosen matvec_q8 shape %v was not swept", sh)
	}
	if p.Key != KeyOf(d.Info()) {
		t.Errorf("key %+v, want %+v", p.Key, KeyOf(d.Info()))
	}
	for _, f := range Formats {
		var b bytes.Buffer
		if err := r.Write(&b, f); err != nil {
			t.Fatal(err)
		}
		if f == "md" && (!strings.Contains(b.String(), "FAILED parity") || !strings.Contains(b.String(), "**winner**") ||
			!strings.Contains(b.String(), "not run: ") || !strings.Contains(b.String(), "Note: matmul_q8: 19x64 F16")) {
			t.Errorf("markdown lacks the failed, winning or not-run cells or the notes:\n%s", b.String())
		}
		if f == "json" {
			var back Report
			if err := json.Unmarshal(b.Bytes(), &back); err != nil || len(back.Tables) != len(r.Tables) || len(back.Notes) != len(r.Notes) {
				t.Errorf("json: %v, %d tables, %d notes", err, len(back.Tables), len(back.Notes))
			}
		}
	}
	if err := r.Write(&bytes.Buffer{}, "xml"); err == nil {
		t.Error("format xml accepted")
	}
}

// TestSweepWithoutIntegerDot checks that a device without integer dot
// products skips the q8 kernels with a note each, neither failing nor
// writing their profile sections, while the other kernels still run.
func TestSweepWithoutIntegerDot(t *testing.T) {
	d := open(t)
	o := Options{Reps: 1, Quick: true, Kernels: []string{KernelMatVecQ8, KernelMatVec, KernelMatMulQ8},
		MatVecs: []kernels.MatVecShape{{Lanes: 32, Rows: 2, Unroll: 1}}, noIntegerDot: true}
	r, err := Sweep(d, tiny, o)
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range r.Tables {
		if tb.Kernel != KernelMatVec {
			t.Errorf("a %s table", tb.Kernel)
		}
	}
	if p := r.Profile; p.MatVec == nil || p.MatVecQ8 != nil || p.MatMulQ8 != nil || len(r.Unchosen) > 0 {
		t.Errorf("profile %s, unchosen %v", p, r.Unchosen)
	}
	if len(r.Notes) != 2 || !strings.HasPrefix(r.Notes[0], "matvec_q8 not run") || !strings.HasPrefix(r.Notes[1], "matmul_q8 not run") ||
		!strings.Contains(r.Notes[0], "integer dot products") {
		t.Errorf("notes %q", r.Notes)
	}
	var b bytes.Buffer
	if err := r.Write(&b, "md"); err != nil || !strings.Contains(b.String(), "Note: matvec_q8 not run") {
		t.Errorf("markdown (%v) lacks the note:\n%s", err, b.String())
	}
}

// TestDefaultQ8Variants checks the q8 sweeps' lists: the built-in default
// of each is among them (so it is measured once, as the reference), names
// are distinct, and the matmul_q8 tiles are those that fit the device.
func TestDefaultQ8Variants(t *testing.T) {
	d := open(t)
	k := kernels.New(d)
	defer k.Close()
	for _, quick := range []bool{false, true} {
		shapes := defaultMatVecsQ8(quick)
		if !slices.Contains(shapes, k.MatVecQ8) {
			t.Errorf("quick %v: matvec_q8 default %v not among %v", quick, k.MatVecQ8, shapes)
		}
		distinct(t, shapes, kernels.MatVecShape.String)
		tiles := defaultQ8Tiles(d.Info(), quick)
		if len(tiles) < 2 {
			t.Errorf("quick %v: matmul_q8 tiles %v", quick, tiles)
		}
		distinct(t, tiles, func(t kernels.Tile) string { return matMulQ8Of(t).String() })
		for _, tile := range tiles {
			if err := checkQ8Tile(tile, d.Info()); err != nil {
				t.Error(err)
			}
		}
		if !quick && !slices.Contains(tiles, k.TileQ8) {
			t.Errorf("matmul_q8 default %v not among %v", k.TileQ8, tiles)
		}
	}
	if n := len(defaultMatVecsQ8(false)); n != 4*4*2 {
		t.Errorf("%d matvec_q8 shapes, want lanes auto/32/64/128 x rows 1/2/4/8 x unroll 1/2", n)
	}
	// 48 KiB (NVIDIA, Intel) takes every tile; lavapipe's 32 KiB the two
	// that need at most that with K-quants.
	big := vk.DeviceInfo{SharedMemory: 48 << 10, MaxWorkgroupInvocations: 1024}
	if got := defaultQ8Tiles(big, false); !slices.Equal(got, q8Tiles) {
		t.Errorf("48 KiB: %v", got)
	}
	small := vk.DeviceInfo{SharedMemory: 32 << 10, MaxWorkgroupInvocations: 1024}
	if got, want := defaultQ8Tiles(small, false), []kernels.Tile{{BM: 32, BN: 128, TM: 4, TN: 8}, {BM: 64, BN: 64, TM: 4, TN: 4}}; !slices.Equal(got, want) {
		t.Errorf("32 KiB: %v, want %v", got, want)
	}
}

// distinct fails t if two of vs have the same name.
func distinct[T any](t *testing.T, vs []T, name func(T) string) {
	t.Helper()
	seen := map[string]bool{}
	for _, v := range vs {
		if n := name(v); seen[n] {
			t.Errorf("%s listed twice", n)
		} else {
			seen[n] = true
		}
	}
}

// TestDefaultAttention checks the attention sweep's lists: decode tries
// the policy's Bc and 8, 16, 32 keys per step at every wave, prefill 16,
// 32 and 64 keys per tile; apart from that grid, 1 and 2 q-heads per
// workgroup (both) and unstaged tiles (prefill) at every wave, or one of
// each kind in quick mode.
func TestDefaultAttention(t *testing.T) {
	d := open(t)
	waves := attention.SupportedWaves(flashattn.Device(d.Info()))
	var full, fullPrefill []Attention
	for _, w := range waves {
		full = append(full, Attention{Wave: w.W, Heads: 1}, Attention{Wave: w.W, Heads: 2})
		for _, g := range []int{1, 2, 4, 8, 16} {
			full = append(full, Attention{Wave: w.W, Groups: g})
		}
		full = append(full, Attention{Wave: w.W, Chunk: 8})
		fullPrefill = append(fullPrefill, Attention{Wave: w.W, Heads: 1}, Attention{Wave: w.W, Heads: 2}, Attention{Wave: w.W, Stage: StageOff})
	}
	for _, c := range []struct {
		quick                     bool
		decode, prefill           []int
		decodeExtra, prefillExtra []Attention
	}{{false, []int{0, 16, 64, 128}, []int{16, 32, 64}, full, fullPrefill},
		{true, []int{0, 64}, []int{16, 32}, []Attention{{Heads: 1}, {Groups: 2}, {Chunk: 8}}, []Attention{{Stage: StageOff}}}} {
		decode, prefill := defaultAttention(d.Info(), c.quick)
		if decode[0] != (Attention{}) || prefill[0] != (Attention{}) {
			t.Errorf("quick %v: the policy is not first", c.quick)
		}
		for _, l := range []struct {
			name  string
			vs    []Attention
			want  []int
			extra []Attention
		}{{"decode", decode[1:], c.decode, c.decodeExtra}, {"prefill", prefill[1:], c.prefill, c.prefillExtra}} {
			distinct(t, l.vs, Attention.String)
			grid, extra := splitExtras(l.vs)
			if !slices.Equal(extra, l.extra) {
				t.Errorf("quick %v: %s variants apart from the grid %v, want %v", c.quick, l.name, extra, l.extra)
			}
			bcs := map[int]map[int]bool{} // by wave
			for _, v := range grid {
				if bcs[v.Wave] == nil {
					bcs[v.Wave] = map[int]bool{}
				}
				bcs[v.Wave][v.Bc] = true
			}
			for w, got := range bcs {
				if len(got) != len(l.want) {
					t.Errorf("quick %v: %s wave %d: Bc %v, want %v", c.quick, l.name, w, got, l.want)
				}
				for _, bc := range l.want {
					if !got[bc] {
						t.Errorf("quick %v: %s wave %d: Bc %v, want %v", c.quick, l.name, w, got, l.want)
					}
				}
			}
		}
	}
}

// splitExtras separates the variants that set q-heads per workgroup,
// staging, lane groups or load width from the Br, Bc and split-k grid.
func splitExtras(vs []Attention) (grid, extra []Attention) {
	for _, v := range vs {
		if v.Heads != 0 || v.Stage != "" || v.Groups != 0 || v.Chunk != 0 {
			extra = append(extra, v)
		} else {
			grid = append(grid, v)
		}
	}
	return grid, extra
}

// TestAttentionJSON checks that heads and staging round-trip through a
// profile's JSON, are left out when the policy chooses, and reach
// attention.Prefs; an unknown staging word becomes a choice the plan
// rejects, not the policy's.
func TestAttentionJSON(t *testing.T) {
	for _, c := range []struct {
		a    Attention
		json string
		pref attention.Prefs
	}{
		{Attention{}, `{"wave":0,"br":0,"bc":0,"splits":0}`, attention.Prefs{}},
		{Attention{Wave: 32, Bc: 16, Heads: 2}, `{"wave":32,"br":0,"bc":16,"splits":0,"heads":2}`,
			attention.Prefs{Bc: 16, Heads: 2}},
		{Attention{Br: 16, Heads: 1, Stage: StageOff}, `{"wave":0,"br":16,"bc":0,"splits":0,"heads":1,"stage":"off"}`,
			attention.Prefs{Br: 16, Heads: 1, Stage: attention.StageOff}},
		{Attention{Stage: StageOn}, `{"wave":0,"br":0,"bc":0,"splits":0,"stage":"on"}`, attention.Prefs{Stage: attention.StageOn}},
		{Attention{Wave: 64, Groups: 4, Chunk: 8}, `{"wave":64,"br":0,"bc":0,"splits":0,"groups":4,"chunk":8}`,
			attention.Prefs{Groups: 4, Chunk: 8}},
	} {
		b, err := json.Marshal(c.a)
		if err != nil || string(b) != c.json {
			t.Errorf("%v: %s, %v; want %s", c.a, b, err, c.json)
		}
		var back Attention
		if err := json.Unmarshal(b, &back); err != nil || back != c.a {
			t.Errorf("%s: read back %+v, %v", b, back, err)
		}
		if o := c.a.Options(0); o.Prefs != c.pref || o.Wave != c.a.Wave {
			t.Errorf("%v: options %+v, want prefs %+v", c.a, o, c.pref)
		}
	}
	if s := (Attention{Wave: 64, Heads: 2, Stage: StageOff}).String(); s != "wave 64 Br auto Bc auto splits auto heads 2 stage off" {
		t.Errorf("named %q", s)
	}
	if s := (Attention{Groups: 2, Chunk: 8}).String(); s != "wave auto Br auto Bc auto splits auto groups 2 chunk 8" {
		t.Errorf("named %q", s)
	}
	if s := (Attention{Bc: 16}).String(); s != "wave auto Br auto Bc 16 splits auto" {
		t.Errorf("named %q: a variant without heads or staging changed its name", s)
	}
	bad := Attention{Stage: "maybe"}.Options(0).Prefs
	if _, err := attention.PlanFor(attention.Device{}, attention.WaveChoice{W: 32, Subgroup: 32},
		attention.Shape{Queries: 16, Heads: 4, KVHeads: 2, HeadDim: 32, KVLen: 64}, bad); err == nil || !strings.Contains(err.Error(), "staging") {
		t.Errorf("stage %q planned (prefs %+v): %v", "maybe", bad, err)
	}
}

// TestSweepAttentionQuick runs the quick attention sweep with its default
// lists: the heads, staging, lane-group and load-width variants run and
// pass parity, the policy's cell names its decode geometry, and both modes
// get a profile section.
func TestSweepAttentionQuick(t *testing.T) {
	d := open(t)
	r, err := Sweep(d, tiny, Options{Reps: 1, Quick: true, Kernels: []string{KernelAttention}, Log: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"decode attention":  {Attention{Heads: 1}.String(), Attention{Groups: 2}.String(), Attention{Chunk: 8}.String()},
		"prefill attention": {Attention{Stage: StageOff}.String()},
	}
	for _, tb := range r.Tables {
		for _, name := range want[tb.Kernel] {
			i := slices.IndexFunc(tb.Cells, func(c Cell) bool { return c.Variant == name })
			if i < 0 {
				t.Errorf("%s %s: no %q cell", tb.Kernel, tb.Shape, name)
			} else if c := tb.Cells[i]; !c.OK() || !(c.MaxErr <= c.Bound) {
				t.Errorf("%s %s %s: %+v", tb.Kernel, tb.Shape, c.Variant, c)
			}
		}
		if tb.Kernel == "decode attention" && !strings.Contains(tb.Cells[0].Variant, " groups ") {
			t.Errorf("%s %s: the policy's cell %q does not name its lane groups", tb.Kernel, tb.Shape, tb.Cells[0].Variant)
		}
	}
	if len(r.Tables) != 4 || r.Profile.Decode == nil || r.Profile.Prefill == nil || len(r.Unchosen) > 0 {
		t.Errorf("%d tables, profile %s, unchosen %v", len(r.Tables), r.Profile, r.Unchosen)
	}
}

// TestSweepCoopAttention runs the quick attention sweep where prefill
// attention takes the matrix units (the emulation): prefill's variants are
// the kernel's tiles, those the model's GQA group of 2 takes run and pass
// the f16 products' parity, the 4-head ones are listed as not run, the
// policy's cell names its tile, and the chosen tile reaches flashattn's
// options.
func TestSweepCoopAttention(t *testing.T) {
	d := open(t)
	if why := vktest.CoopEmulationBroken(d); why != "" {
		t.Logf("not checked: %s", why)
		return
	}
	r, err := Sweep(d, tiny, Options{Reps: 1, Quick: true, Kernels: []string{KernelAttention}, coopEmulated: true, Log: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	prefill := 0
	for _, tb := range r.Tables {
		if tb.Kernel != "prefill attention" {
			continue
		}
		prefill++
		if len(tb.Cells) != len(flashattn.CoopTiles())+1 {
			t.Fatalf("%s: %d cells, want the policy and %d tiles", tb.Shape, len(tb.Cells), len(flashattn.CoopTiles()))
		}
		if !strings.HasPrefix(tb.Cells[0].Variant, "policy (coopmat tile 2x") {
			t.Errorf("%s: the policy's cell %q does not name the tile the group of 2 takes", tb.Shape, tb.Cells[0].Variant)
		}
		for i, c := range tb.Cells[1:] {
			tile := flashattn.CoopTiles()[i]
			wide := tile.Heads > 2
			switch {
			case c.Variant != "coopmat tile "+tile.String():
				t.Errorf("%s: cell %d is %q, want tile %v", tb.Shape, i+1, c.Variant, tile)
			case wide && (c.OK() || !strings.Contains(c.Status, "does not fit")):
				t.Errorf("%s %s: a %d-head tile for a group of 2 ran: %+v", tb.Shape, c.Variant, tile.Heads, c)
			case !wide && (!c.OK() || c.Bound != flashattn.CoopRelErr || !(c.MaxErr <= c.Bound)):
				t.Errorf("%s %s: %+v", tb.Shape, c.Variant, c)
			}
		}
	}
	p := r.Profile.Prefill
	if prefill != 2 || p == nil || len(r.Unchosen) > 0 {
		t.Fatalf("%d prefill tables, profile %s, unchosen %v", prefill, r.Profile, r.Unchosen)
	}
	if p.CoopHeads > 2 || p.Br != 0 || p.Heads != 0 {
		t.Errorf("chosen prefill attention %+v: not the policy or a tile that ran", *p)
	}
	if got := p.Options(0).CoopTile; got != (flashattn.CoopTile{Heads: p.CoopHeads, Bc: p.CoopBc}) {
		t.Errorf("options' tile %v from %+v", got, *p)
	}
	if err := p.check(false); err != nil {
		t.Error(err)
	}
	if err := (Attention{CoopHeads: 2, CoopBc: 32}).check(true); err == nil {
		t.Error("a matrix-unit tile for decode passed the check")
	}
	if err := (Attention{CoopBc: maxCoopBc + 1}).check(false); err == nil {
		t.Error("an out-of-range tile passed the check")
	}
}

// TestProfileLookup saves a profile where Find looks, applies it to the
// kernels, and checks that corrupt, stale and impossible profiles are
// ignored with a reason.
func TestProfileLookup(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	d := open(t)
	info := d.Info()
	if p, warn := Find(info); p != nil || warn != "" {
		t.Fatalf("empty cache: %v, %q", p, warn)
	}
	good := Profile{Format: Format, Key: KeyOf(info), Model: "test",
		MatMul:     &MatMul{BM: 8, BN: 32, TM: 1, TN: 2, X16: true, KB: 16},
		MatVec:     &MatVec{Lanes: 32, Rows: 3, Unroll: 1},
		MatMulQ8:   &MatMulQ8{BM: 16, BN: 64, TM: 2, TN: 8, KB: 32},
		MatVecQ8:   &MatVec{Rows: 2, Unroll: 2}, // lanes sized per matrix
		Decode:     &Attention{Bc: 16, Splits: 2, Heads: 1},
		Prefill:    &Attention{Br: 8, Heads: 2, Stage: StageOff},
		MatMulCoop: &MatMulCoop{BM: 32, BN: 64, WM: 32, WN: 32, BK: 128, KC: 32}}
	path, err := DefaultPath(info)
	if err != nil {
		t.Fatal(err)
	}
	save := func(p Profile) {
		t.Helper()
		if err := p.Save(path); err != nil {
			t.Fatal(err)
		}
	}
	save(good)
	p, warn := Find(info)
	if p == nil || warn != "" || p.Path != path {
		t.Fatalf("Find: %v, %q", p, warn)
	}
	k := kernels.New(d)
	defer k.Close()
	p.ApplyKernels(k)
	if k.Tile != good.MatMul.Tile() || k.MatVec != good.MatVec.Shape() ||
		k.TileQ8 != good.MatMulQ8.Tile() || k.MatVecQ8 != good.MatVecQ8.Shape() || k.CoopTiled != good.MatMulCoop.Tile() {
		t.Errorf("applied: tile %v matvec %v matmul_q8 %v matvec_q8 %v matmul_coopmat %v", k.Tile, k.MatVec, k.TileQ8, k.MatVecQ8, k.CoopTiled)
	}
	if s := p.String(); !strings.Contains(s, "matmul_q8 16x64/2x8/k32") || !strings.Contains(s, "matvec_q8 autol2r2u") ||
		!strings.Contains(s, "matmul_coopmat 32x64/32x32/k128/c32") {
		t.Errorf("profile described as %q", s)
	}
	dec, pre := p.FlashAttn(0)
	if *p.Decode != *good.Decode || *p.Prefill != *good.Prefill {
		t.Errorf("attention read back as %+v %+v", *p.Decode, *p.Prefill)
	}
	if dec.Prefs.Splits != 2 || dec.Prefs.Bc != 16 || dec.Prefs.Heads != 1 || pre.Prefs.Br != 8 ||
		pre.Prefs.Heads != 2 || pre.Prefs.Stage != attention.StageOff {
		t.Errorf("flash attention options %+v %+v", dec, pre)
	}
	if dec, _ := p.FlashAttn(64); dec.Wave != 64 {
		t.Errorf("--wave 64 lost to the profile: %+v", dec)
	}

	bad := func(name, want string, edit func(p *Profile)) {
		t.Run(name, func(t *testing.T) {
			p := good
			p.MatMul = &MatMul{BM: 8, BN: 32, TM: 1, TN: 2}
			edit(&p)
			save(p)
			got, warn := Find(info)
			if got != nil || !strings.Contains(warn, want) || strings.Contains(warn, "\n") {
				t.Errorf("got %v, warning %q; want none and a one-line warning with %q", got, warn, want)
			}
		})
	}
	bad("driver", "stale", func(p *Profile) { p.Key.DriverVersion++ })
	bad("build", "stale", func(p *Profile) { p.Key.Build = "0.0.0+spirv.000000000000" })
	bad("device", "another device", func(p *Profile) { p.Key.UUID = strings.Repeat("ab", 16) })
	bad("format", "format", func(p *Profile) { p.Format = 99 })
	bad("tile", "micro-tiles", func(p *Profile) { p.MatMul.TM = 3 })
	bad("chunk", "activation chunk", func(p *Profile) { p.MatMul.KB = 8 })
	bad("invocations", "invocations", func(p *Profile) {
		*p.MatMul = MatMul{BM: 64, BN: 64, TM: 1, TN: 1}
	})
	// The q8 sections are replaced whole: good's must stay as they are.
	bad("q8 shared memory", "bytes of shared memory", func(p *Profile) { // 256 KiB: more than any device has
		p.MatMulQ8 = &MatMulQ8{BM: 512, BN: 512, TM: 32, TN: 32}
	})
	bad("q8 chunk", "activation chunk", func(p *Profile) { p.MatMulQ8 = &MatMulQ8{BM: 32, BN: 32, TM: 4, TN: 4, KB: 16} })
	bad("matvec lanes", "matvec shape", func(p *Profile) { p.MatVec = &MatVec{Rows: 1, Unroll: 1} }) // only matvec_q8 sizes by the matrix
	bad("q8 lanes", "matvec_q8 shape", func(p *Profile) { p.MatVecQ8 = &MatVec{Lanes: -32, Rows: 1, Unroll: 1} })
	bad("q8 rows", "matvec_q8 shape", func(p *Profile) { p.MatVecQ8 = &MatVec{Rows: 0, Unroll: 1} })
	bad("coop parts", "subgroup parts", func(p *Profile) { p.MatMulCoop = &MatMulCoop{BM: 32, BN: 32, WM: 24, WN: 16, BK: 64, KC: 32} })
	bad("coop chunk", "activation chunk", func(p *Profile) { p.MatMulCoop = &MatMulCoop{BM: 32, BN: 32, WM: 16, WN: 16, BK: 64, KC: 12} })
	bad("coop size", "positive", func(p *Profile) { p.MatMulCoop = &MatMulCoop{BM: 32} })
	// The attention sections too are replaced whole.
	bad("stage word", `stage "maybe"`, func(p *Profile) { p.Prefill = &Attention{Stage: "maybe"} })
	bad("decode stage", "never stages", func(p *Profile) { p.Decode = &Attention{Stage: StageOn} })
	bad("decode heads", "decode attention", func(p *Profile) { p.Decode = &Attention{Heads: 17} })
	bad("prefill heads", "prefill attention", func(p *Profile) { p.Prefill = &Attention{Heads: -1} })
	bad("decode chunk", "decode attention", func(p *Profile) { p.Decode = &Attention{Chunk: 6} })
	bad("decode groups", "decode attention", func(p *Profile) { p.Decode = &Attention{Groups: 32} })
	bad("prefill groups", "decode's", func(p *Profile) { p.Prefill = &Attention{Groups: 2} })

	for name, data := range map[string]string{"truncated": `{"format": 1, "key": {`, "garbage": "\x00\x01",
		"unknown field": `{"format": 1, "tiles": []}`, "two objects": `{"format": 1} {}`} {
		t.Run(name, func(t *testing.T) {
			if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
			got, warn := Find(info)
			if got != nil || !strings.Contains(warn, "ignored") || strings.Contains(warn, "\n") {
				t.Errorf("got %v, warning %q", got, warn)
			}
		})
	}
	if _, _, err := Load(path+".missing", info); !os.IsNotExist(err) {
		t.Errorf("missing file: %v", err)
	}
}

// TestCapped checks the quick sweep's shrinking: K stays whole blocks and
// shapes that become equal merge with their counts.
func TestCapped(t *testing.T) {
	m := Llama3_8B.Capped(256, 512)
	total := 0
	for _, x := range m.Matrices {
		total += x.Count
		if x.Rows > 256 || x.K > 512 || x.K%x.Type.BlockSize() != 0 {
			t.Errorf("%v", x)
		}
	}
	if want := 64 + 48 + 16 + 64 + 16 + 16 + 1; total != want {
		t.Errorf("counts sum to %d, want %d", total, want)
	}
	if len(m.Matrices) != 2 { // every shape becomes 256x512, in Q4_K or Q6_K
		t.Errorf("%d shapes: %v", len(m.Matrices), m.Matrices)
	}
}

// TestDefaultTiles checks the prefill sweep's list without a device: the
// 16x16 reference is measured, names are distinct, every tile fits 1024
// invocations, and every one but the older micro-tiles (some of which need
// 64 KiB) fits the 48 KiB of NVIDIA and Intel with K-quant weights.
func TestDefaultTiles(t *testing.T) {
	tiles := defaultTiles(false)
	seen := map[string]bool{}
	for _, tile := range tiles {
		name := tile.String()
		if seen[name] {
			t.Errorf("%s listed twice", name)
		}
		seen[name] = true
		if tile.BM%tile.TM != 0 || tile.BN%tile.TN != 0 || tile.Invocations() > 1024 {
			t.Errorf("%s: micro-tiles or invocations", name)
		}
		if b := tile.SharedBytes(quant.Q4_K); b > 48<<10 && !slices.Contains(microTiles, kernels.Tile{BM: tile.BM, BN: tile.BN, TM: tile.TM, TN: tile.TN}) {
			t.Errorf("%s: %d bytes of shared memory", name, b)
		}
	}
	if !seen[refTile.String()] {
		t.Errorf("reference %v not swept", refTile)
	}
}

// TestCaseErrors checks that a problem the sweep cannot build is an error,
// with what it had allocated freed, not a panic: activations the q8 layout
// cannot take (K not a multiple of 32) and more queries than keys.
func TestCaseErrors(t *testing.T) {
	d := open(t)
	sw := &sweeper{dev: d, o: Options{Reps: 1, Log: io.Discard}}
	k := kernels.New(d)
	defer k.Close()
	if c, err := sw.newMatrixCase(k, Matrix{Rows: 3, K: 48, Type: quant.F32}, 2, 0, actQ8); err == nil || !strings.Contains(err.Error(), "quantizing") {
		t.Errorf("q8 activations of K 48: %v, %v", c, err)
	}
	if c, err := sw.newAttnCase(tiny, 9, 5); err == nil {
		t.Errorf("9 queries at KV 5: %v, %v", c, err)
	}
}

// coopModel has weights of each kind matmul_coopmat meets: Q4_K, whose
// pieces run over 64 values of K, Q6_K over 128, F16, which it takes
// exactly, and F32 and rows of K not a multiple of 8, which it does not
// take at all.
var coopModel = Model{Name: "coop", Matrices: []Matrix{
	tiny.Matrices[0],
	{Rows: 21, K: 512, Type: quant.Q6_K, Count: 2, Names: []string{"q6"}},
	{Rows: 19, K: 64, Type: quant.F16, Count: 2, Names: []string{"f"}},
	{Rows: 5, K: 64, Type: quant.F32, Count: 1, Names: []string{"f32"}},
	{Rows: 3, K: 36, Type: quant.BF16, Count: 1, Names: []string{"odd"}},
}}

// wrongCoop is matmul_coopmat at its built-in tile reading rows of the
// wrong length.
var wrongCoop = matVariant{name: "wrong K", f16All: true, rec: func(k *kernels.Kernels, s *vk.Sequence, dst, w, xh vk.Binding, t quant.Type, n, rows, K int) error {
	return k.MatMulCoop(s, dst, w, xh, t, n, rows, shortK(t, K), k.CoopTileFor(t))
}}

// TestSweepCoopMat runs the matmul_coopmat sweep on the software emulation
// (lavapipe has no cooperative matrices): its activations are rounded to
// f16 on the device and its reference uses them, so honest tiles pass
// within the f32 bound plus the weights' f16 rounding (none for F16); the
// planted wrong kernels fail; a tile whose K step of 32 takes neither
// Q4_K nor Q6_K falls back there to the built-in tile, as the engine
// would, and one the device cannot run falls back everywhere and is never
// chosen; weights it does not take are left out with a note.
func TestSweepCoopMat(t *testing.T) {
	d := open(t)
	if why := vktest.CoopEmulationBroken(d); why != "" {
		t.Logf("not checked: %s", why)
		return
	}
	k32 := kernels.CoopTile{BM: 32, BN: 32, WM: 16, WN: 16, BK: 32, KC: 32}
	k128 := kernels.CoopTile{BM: 32, BN: 64, WM: 32, WN: 32, BK: 128, KC: 32}
	partial := kernels.CoopTile{BM: 24, BN: 16, WM: 24, WN: 16, BK: 64, KC: 16} // not whole 16x16 fragments
	o := Options{Reps: 1, Kernels: []string{KernelMatMulCoop}, TilesCoop: []kernels.CoopTile{k32, k128, partial}, Columns: 9,
		coopEmulated: true, extra: map[string][]matVariant{KernelMatMulCoop: {wrongCoop, silent}}}
	var log bytes.Buffer
	o.Log = &log
	r, err := Sweep(d, coopModel, o)
	if err != nil {
		t.Fatal(err)
	}
	k := kernels.New(d)
	defer k.Close()
	k.CoopEmulated = true
	if len(r.Tables) != 3 {
		t.Fatalf("%d tables, want Q4_K, Q6_K and F16", len(r.Tables))
	}
	for _, tb := range r.Tables {
		mat := coopModel.Matrices[slices.IndexFunc(coopModel.Matrices, func(m Matrix) bool { return strings.HasPrefix(tb.Shape, m.String()+" ") })]
		bound := dotBound(mat.K, mat.Type != quant.F16, false)
		winners := 0
		for _, c := range tb.Cells {
			planted := c.Variant == wrong.name || c.Variant == silent.name
			fallback := c.Variant == partial.String() || c.Variant == k32.String() && mat.Type != quant.F16
			switch {
			case c.Bound != bound && c.Variant != silent.name: // silent is not a coopmat variant
				t.Errorf("%s %s: bound %g, want %g", tb.Shape, c.Variant, c.Bound, bound)
			case planted && (c.Status != StatusParity || !(c.MaxErr > 10*c.Bound)):
				t.Errorf("%s %s: planted wrong variant: %+v", tb.Shape, c.Variant, c)
			case fallback && (!c.Fallback || c.OK() || c.Millis != 0):
				t.Errorf("%s %s: want a fallback cell, not run: %+v", tb.Shape, c.Variant, c)
			case !planted && !fallback && (c.Fallback || !c.OK() || c.Millis <= 0 || !(c.MaxErr <= c.Bound)):
				t.Errorf("%s %s: %+v", tb.Shape, c.Variant, c)
			}
			if c.Default {
				if want := fmt.Sprintf("%s (%v)", builtinCoop, k.CoopTileForShape(mat.Type, mat.Rows, o.Columns)); c.Variant != want || !c.Ref {
					t.Errorf("%s: default cell %q (ref %v), want %q, the reference", tb.Shape, c.Variant, c.Ref, want)
				}
			}
			if c.Winner {
				winners++
				if planted || fallback {
					t.Errorf("%s: %s won", tb.Shape, c.Variant)
				}
			}
		}
		if winners != 1 {
			t.Errorf("%s: %d winners", tb.Shape, winners)
		}
	}
	for _, want := range []string{"matmul_coopmat: 5x64 F32 [f32] left out", "matmul_coopmat: 3x36 BF16 [odd] left out"} {
		if !slices.ContainsFunc(r.Notes, func(n string) bool { return strings.HasPrefix(n, want) }) {
			t.Errorf("no note %q: %q", want, r.Notes)
		}
	}
	p := r.Profile
	if p.MatMulCoop == nil || len(r.Unchosen) > 0 {
		t.Fatalf("profile %s, unchosen %v", p, r.Unchosen)
	}
	if tile := p.MatMulCoop.Tile(); tile != k32 && tile != k128 && tile != (kernels.CoopTile{}) {
		t.Errorf("chosen matmul_coopmat tile %v: not a swept one that ran", tile)
	}
	var b bytes.Buffer
	if err := r.Write(&b, "md"); err != nil {
		t.Fatal(err)
	}
	if md := b.String(); !strings.Contains(md, "whole runs of 64 Q6_K values; the engine runs the default here") ||
		!strings.Contains(md, "FAILED parity") || !strings.Contains(md, "matmul_coopmat ") {
		t.Errorf("markdown lacks the fallback or failed cells or the choice:\n%s", md)
	}
}

// TestSweepCoopMatQuick runs the quick matmul_coopmat sweep with its
// default tiles on the emulation: every tile it lists runs somewhere,
// passes parity wherever it runs, and differs from the built-in tile on
// some matrix.
func TestSweepCoopMatQuick(t *testing.T) {
	d := open(t)
	if why := vktest.CoopEmulationBroken(d); why != "" {
		t.Logf("not checked: %s", why)
		return
	}
	m := Model{Name: "q4 q6", Matrices: coopModel.Matrices[:2]}
	r, err := Sweep(d, m, Options{Reps: 1, Quick: true, Kernels: []string{KernelMatMulCoop}, coopEmulated: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Tables) != 2 || r.Profile.MatMulCoop == nil || len(r.Unchosen) > 0 {
		t.Fatalf("%d tables, profile %s, unchosen %v", len(r.Tables), r.Profile, r.Unchosen)
	}
	for i := range r.Tables[0].Cells {
		ran := false
		for _, tb := range r.Tables {
			c := tb.Cells[i]
			if !c.Fallback && (!c.OK() || !(c.MaxErr <= c.Bound)) {
				t.Errorf("%s %s: %+v", tb.Shape, c.Variant, c)
			}
			ran = ran || c.OK()
			if c.Fallback && c.Variant != quickCoopTiles[0].String() {
				t.Errorf("%s %s fell back: %s", tb.Shape, c.Variant, c.Status)
			}
		}
		if !ran {
			t.Errorf("%s ran nowhere", r.Tables[0].Cells[i].Variant)
		}
	}
	if n := len(r.Tables[0].Cells); n != len(quickCoopTiles)+1 {
		t.Errorf("%d variants, want the %d quick tiles and the built-in", n, len(quickCoopTiles))
	}
}

// TestSweepCoopMatOff checks that a device whose cooperative-matrix
// policy is off (lavapipe) skips matmul_coopmat with a note saying why,
// without tables or a profile section.
func TestSweepCoopMatOff(t *testing.T) {
	d := open(t)
	if c := coopmat.Choose(kernels.CoopDevice(d.Info())); c.On() {
		t.Logf("nothing to check: %s runs cooperative matrices (%v)", d.Info().Name, c)
		return
	}
	r, err := Sweep(d, tiny, Options{Reps: 1, Quick: true, Kernels: []string{KernelMatMulCoop}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Tables) != 0 || r.Profile.MatMulCoop != nil || len(r.Notes) != 1 ||
		!strings.HasPrefix(r.Notes[0], "matmul_coopmat not run: "+d.Info().Name+" ") {
		t.Errorf("%d tables, profile %s, notes %q", len(r.Tables), r.Profile, r.Notes)
	}
}

// TestChooseFallback checks the choice with Fallback cells: they count as
// their table's default, so a tile that falls back on a shape can win on
// the others' times; one that falls back everywhere never wins, even where
// its total would be the least.
func TestChooseFallback(t *testing.T) {
	cell := func(ms float64) Cell { return Cell{Status: StatusOK, Millis: ms} }
	fb := Cell{Status: "no", Fallback: true}
	def := func(ms float64) Cell { c := cell(ms); c.Default = true; return c }
	for _, c := range []struct {
		name   string
		tables [][]Cell // per table: variants in order
		want   int
	}{
		{"falls back where slower", [][]Cell{{def(3), cell(2), cell(2.5)}, {def(1), fb, cell(1.2)}}, 1},
		{"default wins", [][]Cell{{def(1), cell(2), cell(2.5)}, {def(1), fb, cell(1.2)}}, 0},
		{"everywhere", [][]Cell{{def(3), fb, cell(2.5)}, {def(1), fb, cell(1.2)}}, 2},
		{"default failed", [][]Cell{{def(3), cell(2), cell(2.5)}, {{Status: StatusParity, Default: true}, fb, cell(1.2)}}, 2},
	} {
		var tables []Table
		for _, cells := range c.tables {
			tables = append(tables, Table{Weight: 1, Cells: cells})
		}
		if got := choose(tables); got != c.want {
			t.Errorf("%s: chose %d, want %d", c.name, got, c.want)
		}
	}
}

// TestDefaultCoopTiles checks the matmul_coopmat sweep's lists on the
// emulation: every tile listed runs on some weight type of the model and
// differs there from the built-in tile, every kernels.CoopTiles tile left
// out does neither, and none is listed twice.
func TestDefaultCoopTiles(t *testing.T) {
	d := open(t)
	k := kernels.New(d)
	defer k.Close()
	k.CoopEmulated = true
	types := []quant.Type{quant.Q4_K, quant.Q6_K}
	differs := func(tile kernels.CoopTile) bool {
		return slices.ContainsFunc(types, func(qt quant.Type) bool { return k.CheckCoopTile(tile, qt) == nil && tile != k.CoopTileFor(qt) })
	}
	for _, quick := range []bool{false, true} {
		all := kernels.CoopTiles
		if quick {
			all = quickCoopTiles
		}
		tiles := defaultCoopTiles(k, Llama3_8B, quick)
		distinct(t, tiles, kernels.CoopTile.String)
		// How many remain depends on the device (lavapipe's 32 KiB leave
		// few beyond the built-in); the listing rule below is the point.
		if len(tiles) < 1 {
			t.Errorf("quick %v: tiles %v", quick, tiles)
		}
		for _, tile := range all {
			if listed := slices.Contains(tiles, tile); listed != differs(tile) {
				t.Errorf("quick %v: %v listed %v", quick, tile, listed)
			}
		}
	}
}

// TestMatMulCoopJSON checks the profile section: a tile round-trips, and
// the built-in choice is an empty section that applies the zero tile.
func TestMatMulCoopJSON(t *testing.T) {
	for _, c := range []struct {
		m    MatMulCoop
		json string
	}{
		{MatMulCoop{BM: 128, BN: 128, WM: 64, WN: 64, BK: 64, KC: 64}, `{"bm":128,"bn":128,"wm":64,"wn":64,"bk":64,"kc":64}`},
		{MatMulCoop{}, `{}`},
	} {
		b, err := json.Marshal(c.m)
		if err != nil || string(b) != c.json {
			t.Errorf("%v: %s, %v; want %s", c.m, b, err, c.json)
		}
		var back MatMulCoop
		if err := json.Unmarshal(b, &back); err != nil || back != c.m {
			t.Errorf("%s: read back %+v, %v", b, back, err)
		}
	}
	p := &Profile{MatMulCoop: &MatMulCoop{}}
	if s := p.String(); s != "matmul_coopmat built-in" {
		t.Errorf("described as %q", s)
	}
	k := &kernels.Kernels{CoopTiled: kernels.CoopTile{BM: 16}}
	p.ApplyKernels(k)
	if k.CoopTiled != (kernels.CoopTile{}) {
		t.Errorf("an empty section applied %v", k.CoopTiled)
	}
}
