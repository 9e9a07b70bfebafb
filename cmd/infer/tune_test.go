package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vkinfer/vkinfer/internal/fixtures"
	"github.com/vkinfer/vkinfer/tune"
	"github.com/vkinfer/vkinfer/vk"
)

// TestTuneProfile runs a quick sweep into an empty cache, then checks that
// --show, bench records and --verbose use the saved profile, and that a
// corrupt or stale one is ignored with a one-line warning.
func TestTuneProfile(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	r := infer(t, "tune", "--quick", "-r", "1", "--kernels", "matvec", "-o", "json")
	if r.code != 0 {
		t.Fatalf("tune: exit %d: %s", r.code, r.stderr)
	}
	var report struct {
		Tables  []struct{ Kernel string }
		Profile struct{ MatVec *struct{ Lanes int } }
	}
	if err := json.Unmarshal([]byte(r.stdout), &report); err != nil || len(report.Tables) == 0 || report.Profile.MatVec == nil {
		t.Fatalf("tune -o json: %v: %s", err, r.stdout)
	}
	paths, _ := filepath.Glob(filepath.Join(cache, "vkinfer", "tune", "*.json"))
	if len(paths) != 1 || !strings.Contains(r.stderr, "profile saved to "+paths[0]) {
		t.Fatalf("profiles %v; stderr %s", paths, r.stderr)
	}
	path := paths[0]
	matched := "tuning profile: " + path + " (matched device"

	if r := infer(t, "tune", "--show"); r.code != 0 || !strings.Contains(r.stdout, matched) {
		t.Errorf("--show: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	story := fixtures.Path(t, "stories260K.gguf")
	if r := infer(t, "--backend", "vulkan", "-m", story, "--verbose", "-n", "1", "-p", "Once"); r.code != 0 || !strings.Contains(r.stderr, matched) {
		t.Errorf("--verbose: exit %d, stderr %q", r.code, r.stderr)
	}
	benchProfile := func(args ...string) (string, string) {
		t.Helper()
		r := infer(t, append([]string{"bench", "--backend", "vulkan", "-m", story, "-p", "0", "-n", "1", "-r", "1", "-o", "jsonl"}, args...)...)
		var rec struct {
			TuneProfile *string `json:"tune_profile"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &rec); r.code != 0 || err != nil || rec.TuneProfile == nil {
			t.Fatalf("bench: exit %d, %v: %s %s", r.code, err, r.stdout, r.stderr)
		}
		return *rec.TuneProfile, r.stderr
	}
	if got, _ := benchProfile(); got != path {
		t.Errorf("bench tune_profile %q, want %q", got, path)
	}
	if got, _ := benchProfile("--tune-profile", "none"); got != "none" {
		t.Errorf("--tune-profile none: tune_profile %q", got)
	}

	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	stale := strings.Replace(string(good), `"driver_version": `, `"driver_version": 1`, 1)
	for name, c := range map[string]struct{ data, warn string }{
		"corrupt": {string(good[:len(good)/2]), "ignored: not a profile"},
		"stale":   {stale, "ignored: stale, measured with driver version"},
	} {
		t.Run(name, func(t *testing.T) {
			if err := os.WriteFile(path, []byte(c.data), 0o644); err != nil {
				t.Fatal(err)
			}
			r := infer(t, "tune", "--show")
			warnings := strings.Count(r.stderr, "warning: ")
			if r.code != 0 || warnings != 1 || !strings.Contains(r.stderr, c.warn) || !strings.Contains(r.stdout, "tuning profile: none") {
				t.Errorf("--show: exit %d, %d warnings, stdout %q, stderr %q", r.code, warnings, r.stdout, r.stderr)
			}
			if got, stderr := benchProfile(); got != "none" || !strings.Contains(stderr, c.warn) {
				t.Errorf("bench with a %s profile: tune_profile %q, stderr %q", name, got, stderr)
			}
		})
	}
	r = infer(t, "bench", "--backend", "vulkan", "-m", story, "--tune-profile", path+".missing")
	if r.code != 1 || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 || !strings.Contains(r.stderr, "--tune-profile") {
		t.Errorf("missing --tune-profile file: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestSaveMerged checks that a sweep of some kernels keeps the sections of
// the saved profile that it did not measure, the 8-bit and
// cooperative-matrix kernels' included, and replaces those it did.
func TestSaveMerged(t *testing.T) {
	info := vk.DeviceInfo{Name: "test", Driver: "test", SharedMemory: 48 << 10, MaxWorkgroupInvocations: 1024}
	path := filepath.Join(t.TempDir(), "profile.json")
	old := tune.Profile{Format: tune.Format, Key: tune.KeyOf(info), Model: "old",
		MatMul:     &tune.MatMul{BM: 32, BN: 32, TM: 4, TN: 4, F16: true},
		MatVec:     &tune.MatVec{Lanes: 64, Rows: 2, Unroll: 1},
		MatMulQ8:   &tune.MatMulQ8{BM: 32, BN: 128, TM: 4, TN: 8},
		MatVecQ8:   &tune.MatVec{Rows: 4, Unroll: 1},
		MatMulCoop: &tune.MatMulCoop{BM: 64, BN: 128, WM: 32, WN: 64, BK: 256, KC: 32}}
	if err := old.Save(path); err != nil {
		t.Fatal(err)
	}
	swept := tune.Profile{Format: tune.Format, Key: tune.KeyOf(info), Model: "new",
		MatVec:   &tune.MatVec{Lanes: 32, Rows: 1, Unroll: 2},
		MatVecQ8: &tune.MatVec{Lanes: 32, Rows: 2, Unroll: 2}}
	if err := saveMerged(&swept, path, info); err != nil {
		t.Fatal(err)
	}
	got, warn, err := tune.Load(path, info)
	if err != nil || warn != "" {
		t.Fatalf("reading the merged profile: %v %s", err, warn)
	}
	if *got.MatMul != *old.MatMul || *got.MatMulQ8 != *old.MatMulQ8 || got.MatMulCoop == nil || *got.MatMulCoop != *old.MatMulCoop ||
		*got.MatVec != *swept.MatVec || *got.MatVecQ8 != *swept.MatVecQ8 {
		t.Errorf("merged %s; want the old matmul, matmul_q8 and matmul_coopmat, the new matvec and matvec_q8", got)
	}
}
