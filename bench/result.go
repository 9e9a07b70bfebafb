package bench

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/vkinfer/vkinfer/backend"
	"github.com/vkinfer/vkinfer/gguf"
	"github.com/vkinfer/vkinfer/internal/buildinfo"
	"github.com/vkinfer/vkinfer/vk/engine"
)

// Result is one measured test. Fields that mean what a llama-bench field
// means carry its name, so our json and csv line up with llama-bench's;
// the rest (device, driver, wave, subgroup size, test) are ours.
type Result struct {
	BuildCommit  string    `json:"build_commit"`
	BuildTime    string    `json:"build_time"`
	ModelFile    string    `json:"model_filename"` // as given to -m
	ModelType    string    `json:"model_type"`
	ModelSize    uint64    `json:"model_size"` // bytes of tensor data
	ModelParams  uint64    `json:"model_n_params"`
	Backend      string    `json:"backends"`
	Device       string    `json:"device"`
	Driver       string    `json:"driver"`
	DriverInfo   string    `json:"driver_info"`
	GPULayers    int       `json:"n_gpu_layers"`
	Threads      int       `json:"n_threads"` // CPU backend only
	UBatch       int       `json:"n_ubatch"`
	FlashAttn    int       `json:"flash_attn"`
	Wave         int       `json:"wave"`          // the wave flash attention was asked to use (auto resolved)
	CoopMat      string    `json:"coopmat"`       // whether prefill products ran on cooperative matrices: on, off, or int8 (with the integer variant)
	SubgroupSize int       `json:"subgroup_size"` // the hardware subgroup size it ran with
	TuneProfile  string    `json:"tune_profile"`  // the infer tune profile applied, "none" for built-in defaults; empty on the CPU
	Prompt       int       `json:"n_prompt"`
	Gen          int       `json:"n_gen"`
	Depth        int       `json:"n_depth"`
	Test         string    `json:"test"`
	Time         string    `json:"test_time"` // RFC 3339, UTC, when the test started
	AvgNs        uint64    `json:"avg_ns"`
	StddevNs     uint64    `json:"stddev_ns"`
	AvgTs        float64   `json:"avg_ts"`
	StddevTs     float64   `json:"stddev_ts"`
	SamplesNs    []uint64  `json:"samples_ns"` // one per repetition
	SamplesTs    []float64 `json:"samples_ts"`
}

// setSamples records the repetitions' times and llama-bench's statistics:
// tokens per second per repetition, then mean and sample standard deviation
// of the times and of the rates.
func (r *Result) setSamples(ds []time.Duration) {
	tokens := float64(r.Prompt + r.Gen)
	var ns []float64
	r.SamplesNs, r.SamplesTs = nil, nil
	for _, d := range ds {
		// A zero reading from a coarse clock would make the rate infinite.
		n := max(d.Nanoseconds(), 1)
		ns = append(ns, float64(n))
		r.SamplesNs = append(r.SamplesNs, uint64(n))
		r.SamplesTs = append(r.SamplesTs, 1e9*tokens/float64(n))
	}
	mean, sd := meanStddev(ns)
	r.AvgNs, r.StddevNs = uint64(math.Round(mean)), uint64(math.Round(sd))
	r.AvgTs, r.StddevTs = meanStddev(r.SamplesTs)
}

// meanStddev returns the mean and the sample (n-1) standard deviation, 0 for
// a single value, as llama-bench computes them.
func meanStddev(xs []float64) (mean, sd float64) {
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	if len(xs) < 2 {
		return mean, 0
	}
	var ss float64
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(ss / float64(len(xs)-1))
}

// describe fills the fields that are the same for every test of one loaded
// model: build, model, backend and device.
func (r *runner) describe(spec string, f *gguf.File, be backend.Backend, ub int) Result {
	res := Result{BuildCommit: r.build.commit, BuildTime: r.build.time, ModelFile: spec, UBatch: ub}
	for _, t := range f.Tensors() {
		res.ModelSize += t.Bytes
		res.ModelParams += t.Elements()
	}
	res.ModelType = modelType(f, res.ModelParams)
	if e, ok := be.(*engine.Engine); ok {
		i := e.Device().Info()
		res.Backend, res.Device, res.Driver, res.DriverInfo = "Vulkan", i.Name, i.Driver, i.DriverInfo
		// Every layer runs on the device: llama-bench's -ngl 99.
		res.GPULayers = 99
		res.Wave, res.SubgroupSize = e.Wave()
		res.CoopMat = "off"
		switch {
		case e.CoopInt8():
			res.CoopMat = "int8"
		case e.CoopMat().On():
			res.CoopMat = "on"
		}
		res.TuneProfile = "none"
		if p := e.Tuning(); p != nil {
			res.TuneProfile = p.Path
		}
		return res
	}
	res.Backend, res.Device = "CPU", cpuName() // llama-bench's name; the thread count has its own column
	res.CoopMat = "off"
	res.Threads = r.c.Threads
	if res.Threads == 0 {
		res.Threads = runtime.NumCPU()
	}
	return res
}

// modelType is llama.cpp's model description, "llama 8B Q4_K - Medium":
// architecture, size and file type. A file without a known general.file_type
// is described by its general.name instead.
func modelType(f *gguf.File, params uint64) string {
	size, ok := f.String("general.size_label")
	if !ok {
		size = sizeLabel(params)
	}
	if ft, ok := f.Uint("general.file_type"); ok {
		if name, ok := ftypeNames[ft]; ok {
			return fmt.Sprintf("%s %s %s", f.Arch(), size, name)
		}
	}
	if name, ok := f.String("general.name"); ok && name != "" {
		return name
	}
	return f.Arch() + " " + size
}

// sizeLabel rounds a parameter count the way model names do: 8.03 B is 8B.
func sizeLabel(params uint64) string {
	p := float64(params)
	switch {
	case p >= 1e9:
		return fmt.Sprintf("%.0fB", p/1e9)
	case p >= 1e6:
		return fmt.Sprintf("%.0fM", p/1e6)
	}
	return fmt.Sprintf("%.0fK", p/1e3)
}

// ftypeNames are llama.cpp's names for general.file_type (llama_ftype, see
// llama_model_ftype_name), so our model column reads like theirs.
var ftypeNames = map[uint64]string{
	0: "all F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1",
	10: "Q2_K - Medium", 11: "Q3_K - Small", 12: "Q3_K - Medium", 13: "Q3_K - Large",
	14: "Q4_K - Small", 15: "Q4_K - Medium", 16: "Q5_K - Small", 17: "Q5_K - Medium",
	18: "Q6_K", 19: "IQ2_XXS - 2.0625 bpw", 20: "IQ2_XS - 2.3125 bpw", 21: "Q2_K - Small",
	22: "IQ3_XS - 3.3 bpw", 23: "IQ3_XXS - 3.0625 bpw", 24: "IQ1_S - 1.5625 bpw",
	25: "IQ4_NL - 4.5 bpw", 26: "IQ3_S - 3.4375 bpw", 27: "IQ3_S mix - 3.66 bpw",
	28: "IQ2_S - 2.5 bpw", 29: "IQ2_M - 2.7 bpw", 30: "IQ4_XS - 4.25 bpw",
	31: "IQ1_M - 1.75 bpw", 32: "BF16",
}

// cpuName is the processor's model name, which identifies a CPU run the way
// the device name identifies a GPU one.
func cpuName() string {
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				return strings.TrimSpace(v)
			}
		}
	}
	return runtime.GOOS + "/" + runtime.GOARCH
}

// build identifies the binary that measured: the commit it was built from
// ("-dirty" when the tree had changes) and that commit's time.
type build struct{ commit, time string }

func readBuild() build {
	i := buildinfo.Read()
	return build{commit: i.Commit, time: i.Time}
}
