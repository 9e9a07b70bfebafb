package tune

import (
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/vkinfer/vkinfer/internal/vktest"
	"github.com/vkinfer/vkinfer/quant"
	"github.com/vkinfer/vkinfer/vk"
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
// matrix as if rows had one superblock fewer, so every output is a
// different dot product; silent records nothing at all, so the output
// keeps whatever the buffer held.
var (
	wrong = matVariant{name: "wrong K", rec: func(k *kernels.Kernels, s *vk.Sequence, dst, w, x vk.Binding, t quant.Type, n, rows, K int) error {
		return k.MatMulTiled(s, dst, w, x, t, n, rows, K-t.BlockSize(), kernels.Tile{BM: 16, BN: 16, TM: 1, TN: 1})
	}}
	silent = matVariant{name: "silent", rec: func(*kernels.Kernels, *vk.Sequence, vk.Binding, vk.Binding, vk.Binding, quant.Type, int, int, int) error {
		return nil
	}}
	wrongVec = matVariant{name: "wrong K", rec: func(k *kernels.Kernels, s *vk.Sequence, dst, w, x vk.Binding, t quant.Type, n, rows, K int) error {
		return k.MatVecWith(s, dst, w, x, t, n, rows, K-t.BlockSize(), kernels.MatVecShape{Lanes: 32, Rows: 1, Unroll: 1})
	}}
)

// TestSweep runs a tiny sweep of every kernel end to end: every honest
// variant passes parity, the planted wrong ones are measured, rejected and
// never chosen, and the profile holds winners that were measured.
func TestSweep(t *testing.T) {
	d := open(t)
	tiles := []kernels.Tile{{BM: 16, BN: 16, TM: 1, TN: 1}, {BM: 8, BN: 32, TM: 1, TN: 1}}
	o := Options{Reps: 2, Tiles: tiles, MatVecs: []kernels.MatVecShape{{Lanes: 32, Rows: 3, Unroll: 1}},
		Decode: []Attention{{Bc: 16, Splits: 1}}, Prefill: []Attention{{Br: 8, Bc: 16}},
		KVLens: []int{40}, Columns: 9, Queries: 9,
		extraMatMul: []matVariant{wrong, silent}, extraMatVec: []matVariant{wrongVec}}
	var log bytes.Buffer
	o.Log = &log
	r, err := Sweep(d, tiny, o)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, tb := range r.Tables {
		kinds[tb.Kernel]++
		winners := 0
		for _, c := range tb.Cells {
			planted := c.Variant == wrong.name || c.Variant == silent.name
			switch {
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
		}
		if winners != 1 {
			t.Errorf("%s %s: %d winners", tb.Kernel, tb.Shape, winners)
		}
	}
	want := map[string]int{KernelMatMul: 1, KernelMatVec: 1, "decode attention": 1, "prefill attention": 1}
	for k, n := range want {
		if kinds[k] != n {
			t.Errorf("%d %s tables, want %d (all: %v)", kinds[k], k, n, kinds)
		}
	}
	p := r.Profile
	if p.MatMul == nil || p.MatVec == nil || p.Decode == nil || p.Prefill == nil || len(r.Unchosen) > 0 {
		t.Fatalf("profile %s, unchosen %v", p, r.Unchosen)
	}
	k, err := kernels.New(d)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	if tile := p.MatMul.Tile(); tile != tiles[0] && tile != tiles[1] && tile != k.Tile {
		t.Errorf("chosen tile %v was not swept", tile)
	}
	if p.Key != KeyOf(d.Info()) {
		t.Errorf("key %+v, want %+v", p.Key, KeyOf(d.Info()))
	}
	for _, f := range Formats {
		var b bytes.Buffer
		if err := r.Write(&b, f); err != nil {
			t.Fatal(err)
		}
		if f == "md" && (!strings.Contains(b.String(), "FAILED parity") || !strings.Contains(b.String(), "**winner**")) {
			t.Errorf("markdown lacks the failed or winning cells:\n%s", b.String())
		}
		if f == "json" {
			var back Report
			if err := json.Unmarshal(b.Bytes(), &back); err != nil || len(back.Tables) != len(r.Tables) {
				t.Errorf("json: %v, %d tables", err, len(back.Tables))
			}
		}
	}
	if err := r.Write(&bytes.Buffer{}, "xml"); err == nil {
		t.Error("format xml accepted")
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
		MatMul:  &MatMul{BM: 8, BN: 32, TM: 1, TN: 2, X16: true, KB: 16},
		MatVec:  &MatVec{Lanes: 32, Rows: 3, Unroll: 1},
		Decode:  &Attention{Bc: 16, Splits: 2},
		Prefill: &Attention{Br: 8}}
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
	k, err := kernels.New(d)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	p.ApplyKernels(k)
	if k.Tile != good.MatMul.Tile() || k.MatVec != good.MatVec.Shape() {
		t.Errorf("applied: tile %v matvec %v", k.Tile, k.MatVec)
	}
	dec, pre := p.FlashAttn(0)
	if dec.Prefs.Splits != 2 || dec.Prefs.Bc != 16 || pre.Prefs.Br != 8 {
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
