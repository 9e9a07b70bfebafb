// Package tune measures kernel geometry on one device (the prefill matmul's
// tile and the decode matrix-vector's shape, with f32 and with 8-bit
// activations; the cooperative-matrix prefill product's tile; flash
// attention's Br, Bc, wave, split-k, q-heads per
// workgroup and staging), checks every measured variant against a CPU
// reference, and keeps the winners as a profile that the Vulkan engine
// applies at start-up.
//
// A profile is only ever applied to the device, driver and kernels it was
// measured on: its Key is checked against the running device, and anything
// else (another device, another driver version, other shader binaries, an
// unreadable file) is ignored with a warning, never trusted.
package tune

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode"

	"github.com/vkinfer/vkinfer/attention"
	"github.com/vkinfer/vkinfer/shaders"
	"github.com/vkinfer/vkinfer/vk"
	"github.com/vkinfer/vkinfer/vk/flashattn"
	"github.com/vkinfer/vkinfer/vk/kernels"
)

// Version is vkinfer's version as far as profiles are concerned: bump it
// when a kernel's meaning of a geometry changes without its SPIR-V changing
// (a host-side change of how a tile is dispatched, say).
const Version = "0.1.0"

// Format is the profile file format; files of another format are ignored.
const Format = 1

// tunedShaders are the kernels whose geometry a profile holds; their SPIR-V
// is part of the key, so rebuilt shaders make old measurements stale.
// quantize_q8 and quantize_f16 are among them because the 8-bit and the
// cooperative-matrix kernels' parity and speed depend on the layouts they
// write.
var tunedShaders = []string{"matmul", "matvec", "matmul_q8", "matvec_q8", "quantize_q8",
	"matmul_coopmat", "quantize_f16", "flash_attn", "flash_attn_decode", "flash_attn_reduce",
	"flash_attn_coopmat"}

// Build is the vkinfer build a profile belongs to: Version and a hash of
// the tuned kernels' SPIR-V.
func Build() string {
	h := sha256.New()
	for _, n := range tunedShaders {
		h.Write(shaders.SPIRV(n))
	}
	return Version + "+spirv." + hex.EncodeToString(h.Sum(nil)[:6])
}

// Key identifies what a profile was measured on.
type Key struct {
	Device        string `json:"device"` // for people; not compared
	UUID          string `json:"uuid"`
	Driver        string `json:"driver"`
	DriverVersion uint32 `json:"driver_version"`
	Build         string `json:"vkinfer"`
}

// KeyOf is the key of a device running this build.
func KeyOf(info vk.DeviceInfo) Key {
	return Key{Device: info.Name, UUID: hex.EncodeToString(info.UUID[:]), Driver: info.Driver,
		DriverVersion: info.DriverVersion, Build: Build()}
}

// mismatch says how k differs from the running device's key, "" if not.
func (k Key) mismatch(run Key) string {
	switch {
	case k.UUID != run.UUID || k.Driver != run.Driver:
		return fmt.Sprintf("measured on another device (%s, %s, UUID %s)", k.Device, k.Driver, k.UUID)
	case k.DriverVersion != run.DriverVersion:
		return fmt.Sprintf("measured with driver version %d, running %d", k.DriverVersion, run.DriverVersion)
	case k.Build != run.Build:
		return fmt.Sprintf("measured with vkinfer %s, running %s", k.Build, run.Build)
	}
	return ""
}

// MatMul is the prefill tile (kernels.Tile).
type MatMul struct {
	BM  int  `json:"bm"`
	BN  int  `json:"bn"`
	TM  int  `json:"tm"`
	TN  int  `json:"tn"`
	F16 bool `json:"f16"`
	X16 bool `json:"x16,omitempty"`
	KB  int  `json:"kb,omitempty"`
}

// Tile converts m to the kernels' type.
func (m MatMul) Tile() kernels.Tile {
	return kernels.Tile{BM: m.BM, BN: m.BN, TM: m.TM, TN: m.TN, F16: m.F16, X16: m.X16, KB: m.KB}
}

// MatMulQ8 is the prefill tile of the 8-bit-activation kernel (matmul_q8):
// a kernels.Tile without F16 and X16, which that kernel does not have. KB
// is its activation chunk, 32 or 64, 0 meaning 64.
type MatMulQ8 struct {
	BM int `json:"bm"`
	BN int `json:"bn"`
	TM int `json:"tm"`
	TN int `json:"tn"`
	KB int `json:"kb,omitempty"`
}

// matMulQ8Of is the matmul_q8 section of a tile.
func matMulQ8Of(t kernels.Tile) MatMulQ8 {
	return MatMulQ8{BM: t.BM, BN: t.BN, TM: t.TM, TN: t.TN, KB: t.KB}
}

// Tile converts m to the kernels' type.
func (m MatMulQ8) Tile() kernels.Tile {
	return kernels.Tile{BM: m.BM, BN: m.BN, TM: m.TM, TN: m.TN, KB: m.KB}
}

// String is BMxBN/TMxTN, with /kKB for a chunk other than 64: Tile.String
// would add an f32 that means nothing here and hide KB 32, its default.
func (m MatMulQ8) String() string {
	s := fmt.Sprintf("%dx%d/%dx%d", m.BM, m.BN, m.TM, m.TN)
	if m.KB != 0 && m.KB != 64 {
		s += fmt.Sprintf("/k%d", m.KB)
	}
	return s
}

// MatVec is the decode matrix-vector shape (kernels.MatVecShape), of the
// f32 kernel or, in a profile's matvec_q8 section, of the 8-bit one, where
// Lanes 0 leaves the lanes to kernels.SizeMatVecQ8.
type MatVec struct {
	Lanes  int `json:"lanes"`
	Rows   int `json:"rows"`
	Unroll int `json:"unroll"`
	Wave   int `json:"wave"`
}

// Shape converts m to the kernels' type.
func (m MatVec) Shape() kernels.MatVecShape {
	return kernels.MatVecShape{Lanes: m.Lanes, Rows: m.Rows, Unroll: m.Unroll, Wave: m.Wave}
}

// Attention is one flash-attention setting; zero fields leave the choice
// to the policy (package attention).
type Attention struct {
	Wave   int `json:"wave"`
	Br     int `json:"br"`
	Bc     int `json:"bc"`
	Splits int `json:"splits"`
	// Heads is the q-heads per workgroup (attention.Prefs.Heads).
	Heads int `json:"heads,omitempty"`
	// Stage is prefill's staging of K and V in shared memory: "off" or
	// "on" ("" is the policy's). A word, not attention.StagePref's number,
	// so that a profile reads clearly and an edit cannot shift its meaning.
	Stage string `json:"stage,omitempty"`
	// Groups and Chunk are decode's lane groups per workgroup and f16
	// values per load (attention.Prefs.Groups, Prefs.Chunk).
	Groups int `json:"groups,omitempty"`
	Chunk  int `json:"chunk,omitempty"`
	// CoopHeads and CoopBc are prefill's tile on the matrix units, where
	// the device runs it there (flashattn.Options.CoopTile): q-heads per
	// workgroup and keys per tile, 0 leaving either to the kernel's order.
	CoopHeads int `json:"coop_heads,omitempty"`
	CoopBc    int `json:"coop_bc,omitempty"`
}

// Staging choices of Attention.Stage.
const (
	StageOff = "off"
	StageOn  = "on"
)

// stagePref converts Attention.Stage to the policy's type. A word it does
// not know becomes a choice attention.PlanFor rejects, so a variant that
// bypassed validate is reported as not run rather than run as the policy.
func stagePref(s string) attention.StagePref {
	switch s {
	case "":
		return attention.StageAuto
	case StageOff:
		return attention.StageOff
	case StageOn:
		return attention.StageOn
	}
	return -1
}

// Options converts a to flashattn's options; wave, when not 0 (the user's
// --wave), overrides the measured one.
func (a Attention) Options(wave int) flashattn.Options {
	if wave == 0 {
		wave = a.Wave
	}
	return flashattn.Options{Wave: wave, Prefs: attention.Prefs{Br: a.Br, Bc: a.Bc, Splits: a.Splits,
		Heads: a.Heads, Stage: stagePref(a.Stage), Groups: a.Groups, Chunk: a.Chunk},
		CoopTile: flashattn.CoopTile{Heads: a.CoopHeads, Bc: a.CoopBc}}
}

// Profile is the measured geometry for one device. Sections are nil where
// no sweep ran; the engine then keeps its built-in defaults for them.
type Profile struct {
	Format  int       `json:"format"`
	Key     Key       `json:"key"`
	Created time.Time `json:"created"`
	Model   string    `json:"model"` // the shapes the sweep measured
	MatMul  *MatMul   `json:"matmul,omitempty"`
	MatVec  *MatVec   `json:"matvec,omitempty"`
	// The 8-bit-activation kernels, which the engine uses instead of the
	// f32 ones for quantized weights where kernels.DefaultQ8 holds (or
	// with --int-dot on).
	MatMulQ8 *MatMulQ8 `json:"matmul_q8,omitempty"`
	MatVecQ8 *MatVec   `json:"matvec_q8,omitempty"`
	// The cooperative-matrix prefill product, which the engine uses for
	// prefill where the device's policy turns it on (kernels.UseCoop).
	MatMulCoop *MatMulCoop `json:"matmul_coopmat,omitempty"`
	// Decode (one query) and prefill attention are tuned apart: decode is
	// bound by splitting the KV range, prefill by rows per workgroup.
	Decode  *Attention `json:"decode_attention,omitempty"`
	Prefill *Attention `json:"prefill_attention,omitempty"`

	// Path is the file the profile was read from or written to.
	Path string `json:"-"`
}

// ApplyKernels sets the shapes of k's matrix products (f32 and 8-bit
// activations, cooperative matrices) that the profile holds; a nil
// profile changes nothing.
func (p *Profile) ApplyKernels(k *kernels.Kernels) {
	if p == nil {
		return
	}
	if p.MatMul != nil {
		k.Tile = p.MatMul.Tile()
	}
	if p.MatVec != nil {
		k.MatVec = p.MatVec.Shape()
	}
	if p.MatMulQ8 != nil {
		k.TileQ8 = p.MatMulQ8.Tile()
	}
	if p.MatVecQ8 != nil {
		k.MatVecQ8 = p.MatVecQ8.Shape()
	}
	if p.MatMulCoop != nil {
		k.CoopTiled = p.MatMulCoop.Tile() // an empty section: zero, the built-in choice
	}
}

// FlashAttn returns the options of the decode and the prefill flash
// attention; wave, when not 0, is the user's --wave and wins over the
// profile. A nil profile gives the policy's defaults.
func (p *Profile) FlashAttn(wave int) (decode, prefill flashattn.Options) {
	decode, prefill = flashattn.Options{Wave: wave}, flashattn.Options{Wave: wave}
	if p == nil {
		return decode, prefill
	}
	if p.Decode != nil {
		decode = p.Decode.Options(wave)
	}
	if p.Prefill != nil {
		prefill = p.Prefill.Options(wave)
	}
	return decode, prefill
}

// String describes the profile in one line.
func (p *Profile) String() string {
	if p == nil {
		return "built-in defaults"
	}
	var parts []string
	if p.MatMul != nil {
		parts = append(parts, "matmul "+p.MatMul.Tile().String())
	}
	if p.MatVec != nil {
		parts = append(parts, "matvec "+p.MatVec.Shape().String())
	}
	if p.MatMulQ8 != nil {
		parts = append(parts, "matmul_q8 "+p.MatMulQ8.String())
	}
	if p.MatVecQ8 != nil {
		parts = append(parts, "matvec_q8 "+p.MatVecQ8.Shape().String())
	}
	if p.MatMulCoop != nil {
		parts = append(parts, "matmul_coopmat "+p.MatMulCoop.String())
	}
	for _, a := range []struct {
		name string
		a    *Attention
	}{{"decode attention", p.Decode}, {"prefill attention", p.Prefill}} {
		if a.a != nil {
			parts = append(parts, fmt.Sprintf("%s %v", a.name, *a.a))
		}
	}
	return strings.Join(parts, "; ")
}

// Dir is where profiles live: the user's cache directory, vkinfer/tune.
func Dir() (string, error) {
	c, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("tune: no cache directory for profiles: %w", err)
	}
	return filepath.Join(c, "vkinfer", "tune"), nil
}

// DefaultPath is the profile file of a device: one per device and driver,
// overwritten by the next sweep; the driver version and build are checked
// from its contents, so an upgrade finds the old file and says it is stale.
func DefaultPath(info vk.DeviceInfo) (string, error) {
	dir, err := Dir()
	if err != nil {
		return "", err
	}
	driver := strings.Map(func(r rune) rune {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			return unicode.ToLower(r)
		}
		return '_'
	}, info.Driver)
	return filepath.Join(dir, fmt.Sprintf("%x-%s.json", info.UUID[:], driver)), nil
}

// Decode reads a profile and checks it is well formed: the right format,
// no unknown fields, and geometry the device can run. It does not compare
// keys; see Check.
func Decode(r io.Reader, info vk.DeviceInfo) (*Profile, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var p Profile
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("not a profile: %w", err)
	}
	if dec.More() {
		return nil, errors.New("not a profile: data after the JSON object")
	}
	if p.Format != Format {
		return nil, fmt.Errorf("profile format %d, want %d", p.Format, Format)
	}
	return &p, p.validate(info)
}

// validate checks that every section is geometry this device accepts, so
// that a hand-edited or damaged profile fails here with a clear message and
// not at the first forward pass.
func (p *Profile) validate(info vk.DeviceInfo) error {
	if m := p.MatMul; m != nil {
		t := m.Tile()
		if m.BM < 1 || m.BN < 1 || m.TM < 1 || m.TN < 1 || m.BM%m.TM != 0 || m.BN%m.TN != 0 {
			return fmt.Errorf("matmul tile %v: micro-tiles must divide the tile", t)
		}
		if m.KB != 0 && m.KB != 16 && m.KB != 32 && m.KB != 64 {
			return fmt.Errorf("matmul tile %v: activation chunk %d, want 16, 32 or 64", t, m.KB)
		}
		if t.Invocations() > info.MaxWorkgroupInvocations {
			return fmt.Errorf("matmul tile %v: %d invocations, device allows %d", t, t.Invocations(), info.MaxWorkgroupInvocations)
		}
		for _, qt := range kernels.WeightTypes {
			if b := t.SharedBytes(qt); b > info.SharedMemory {
				return fmt.Errorf("matmul tile %v: %d bytes of shared memory for %s, device has %d", t, b, qt, info.SharedMemory)
			}
		}
	}
	if m := p.MatMulQ8; m != nil {
		if err := checkQ8Tile(m.Tile(), info); err != nil {
			return err
		}
	}
	if m := p.MatMulCoop; m != nil {
		if err := m.check(info); err != nil {
			return err
		}
	}
	if m := p.MatVec; m != nil {
		if err := m.check("matvec", 1, info); err != nil {
			return err
		}
	}
	if m := p.MatVecQ8; m != nil {
		if err := m.check("matvec_q8", 0, info); err != nil { // lanes 0: sized by the matrix
			return err
		}
	}
	dev := flashattn.Device(info)
	for _, s := range []struct {
		a      *Attention
		decode bool
	}{{p.Decode, true}, {p.Prefill, false}} {
		if s.a == nil {
			continue
		}
		if _, err := attention.ChooseWave(dev, s.a.Wave); err != nil {
			return err
		}
		if err := s.a.check(s.decode); err != nil {
			return err
		}
	}
	return nil
}

// maxHeads bounds Attention.Heads: a workgroup owns at most 32 rows
// (prefill) and decode pads at most 16 heads. Whether Heads divides the
// GQA group depends on the model, which the profile does not fix: the plan
// checks that per dispatch, and the engine takes the policy's choice for a
// model the profile's does not fit (engine.Engine's flashFor).
const maxHeads, maxDecodeHeads = 32, 16

// maxGroups bounds Attention.Groups: 16 lane groups of 64 are the most
// invocations a workgroup may have anywhere (1024); the plan checks the
// device's own limit and that the count is a power of two.
const maxGroups = 16

// maxCoopBc bounds Attention.CoopBc, the keys of a tile on the matrix
// units; the plan checks what the device's shared memory takes.
const maxCoopBc = 256

// check reports whether a is in range for decode or prefill attention.
func (a Attention) check(decode bool) error {
	heads, mode := maxHeads, "prefill"
	if decode {
		heads, mode = maxDecodeHeads, "decode"
	}
	if a.Br < 0 || a.Bc < 0 || a.Splits < 0 || a.Splits > attention.MaxSplits || a.Heads < 0 || a.Heads > heads ||
		a.Groups < 0 || a.Groups > maxGroups || (a.Chunk != 0 && a.Chunk != 4 && a.Chunk != 8) {
		return fmt.Errorf("%s attention %+v is out of range", mode, a)
	}
	if !decode && (a.Groups != 0 || a.Chunk != 0) {
		return fmt.Errorf("prefill attention %+v: lane groups and load width are decode's", a)
	}
	if a.CoopHeads < 0 || a.CoopHeads > maxHeads || a.CoopBc < 0 || a.CoopBc > maxCoopBc {
		return fmt.Errorf("%s attention %+v: the matrix units' tile is out of range", mode, a)
	}
	if decode && (a.CoopHeads != 0 || a.CoopBc != 0) {
		return fmt.Errorf("decode attention %+v: the matrix units' tile is prefill's", a)
	}
	if a.Stage != "" && a.Stage != StageOff && a.Stage != StageOn {
		return fmt.Errorf("%s attention stage %q, want %q, %q or none", mode, a.Stage, StageOff, StageOn)
	}
	if decode && a.Stage == StageOn {
		return fmt.Errorf("decode attention stage %q: decode never stages K and V", a.Stage)
	}
	return nil
}

// checkQ8Tile reports whether matmul_q8 can run t on the device for every
// weight type it takes (K-quants need the most shared memory).
func checkQ8Tile(t kernels.Tile, info vk.DeviceInfo) error {
	name := matMulQ8Of(t).String()
	if t.BM < 1 || t.BN < 1 || t.TM < 1 || t.TN < 1 || t.BM%t.TM != 0 || t.BN%t.TN != 0 {
		return fmt.Errorf("matmul_q8 tile %s: micro-tiles must divide the tile", name)
	}
	if t.KB != 0 && t.KB != 32 && t.KB != 64 {
		return fmt.Errorf("matmul_q8 tile %s: activation chunk %d, want 32 or 64", name, t.KB)
	}
	if t.Invocations() > info.MaxWorkgroupInvocations {
		return fmt.Errorf("matmul_q8 tile %s: %d invocations, device allows %d", name, t.Invocations(), info.MaxWorkgroupInvocations)
	}
	for _, qt := range kernels.WeightTypes {
		if !kernels.HasQ8(qt) {
			continue
		}
		if b := t.Q8SharedBytes(qt); b > info.SharedMemory {
			return fmt.Errorf("matmul_q8 tile %s: %d bytes of shared memory for %s, device has %d", name, b, qt, info.SharedMemory)
		}
	}
	return nil
}

// check reports whether the device can run m as kernel's shape, with at
// least minLanes lanes.
func (m MatVec) check(kernel string, minLanes int, info vk.DeviceInfo) error {
	if m.Lanes < minLanes || m.Rows < 1 || m.Unroll < 1 || m.Lanes > info.MaxWorkgroupInvocations || m.Wave < 0 {
		return fmt.Errorf("%s shape %+v is out of range", kernel, m)
	}
	if m.Wave != 0 && (!info.SizeControl || m.Wave < info.MinSubgroupSize || m.Wave > info.MaxSubgroupSize) {
		return fmt.Errorf("%s wave %d: the device cannot require it", kernel, m.Wave)
	}
	return nil
}

// Load reads the profile at path for the running device. A missing file
// is an error (os.ErrNotExist); a file that is not a valid profile, or was
// measured on another device, driver or build, is returned with a nil
// profile and the reason as warning, for the caller to print: such a
// profile is never applied.
func Load(path string, info vk.DeviceInfo) (p *Profile, warning string, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, "", err
	}
	p, err = Decode(bytes.NewReader(data), info)
	if err != nil {
		return nil, fmt.Sprintf("tuning profile %s ignored: %v", path, err), nil
	}
	if why := p.Key.mismatch(KeyOf(info)); why != "" {
		return nil, fmt.Sprintf("tuning profile %s ignored: stale, %s; run infer tune again", path, why), nil
	}
	p.Path = path
	return p, "", nil
}

// Find looks up the running device's profile in the cache directory: nil
// without a warning when there is none, nil with a warning when the one
// there is unusable.
func Find(info vk.DeviceInfo) (*Profile, string) {
	path, err := DefaultPath(info)
	if err != nil {
		return nil, err.Error()
	}
	p, warn, err := Load(path, info)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, ""
	case err != nil:
		return nil, fmt.Sprintf("tuning profile %s ignored: %v", path, err)
	}
	return p, warn
}

// Save writes p to path (creating its directory) through a temporary file
// and a rename, so a reader never sees half a profile.
func (p *Profile) Save(path string) error {
	data, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("tune: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("tune: %w", err)
	}
	_, err = tmp.Write(append(data, '\n'))
	err = errors.Join(err, tmp.Chmod(0o644), tmp.Close())
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("tune: writing %s: %w", path, err)
	}
	p.Path = path
	return nil
}
