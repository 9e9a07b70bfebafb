// Package synth writes synthetic GGUF models with the geometry and layout of
// real checkpoints (Llama 2/3/3.2, Qwen2.5, Qwen3, Qwen3-MoE, Gemma 3, Phi-3, and tiny
// ones for CI) in llama.cpp's type mixes, with random weights that keep
// activations finite and a synthetic vocabulary of the family's tokenizer
// kind (SentencePiece or byte-level BPE, with its special tokens). The files
// load in llama.cpp as well as here, so anyone can run and benchmark without
// a download. Output is deterministic for a seed.
package synth

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/vkinfer/vkinfer/gguf"
)

// DefaultFtype is the mix Resolve uses when a spec names none.
const DefaultFtype = "q4_k_m"

// specPrefix marks a model argument (-m) that names a preset, not a file.
const specPrefix = "synth:"

// Write generates preset in type mix ftype ("q4_k_m", "q8_0" or "f16") from
// seed and writes it to path. progress, when not nil, is called (never
// concurrently) with the bytes of tensor data generated so far and the
// total. The file appears under path only once complete: it is written to
// a temporary file in the same directory and renamed.
func Write(path, preset, ftype string, seed uint64, progress func(done, total uint64)) error {
	if path == "" {
		return errors.New("synth: no output path")
	}
	p, err := lookupPreset(preset)
	if err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	f, err := lookupFtype(ftype)
	if err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	tensors, total, err := p.plan(f, seed, progress)
	if err != nil {
		return fmt.Errorf("synth: %s %s: %w", p.name, f.name, err)
	}
	kvs, err := p.metadata(f)
	if err != nil {
		return fmt.Errorf("synth: %s: %w", p.name, err)
	}
	if progress != nil {
		progress(0, total)
	}

	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	tmpPath := tmp.Name()
	// CreateTemp makes the file private (0600); a model is an ordinary file.
	err = errors.Join(tmp.Chmod(0o644), tmp.Close())
	if err == nil {
		err = gguf.Write(tmpPath, kvs, tensors)
	}
	if err == nil {
		err = os.Rename(tmpPath, path)
	}
	if err != nil {
		os.Remove(tmpPath)
		return fmt.Errorf("synth: writing %s: %w", path, err)
	}
	return nil
}

// plan lists the tensors of p in mix f with their generators, and the total
// bytes of tensor data.
func (p *preset) plan(f *ftype, seed uint64, progress func(done, total uint64)) ([]gguf.WriteTensor, uint64, error) {
	specs := p.tensors()
	var total uint64
	out := make([]gguf.WriteTensor, len(specs))
	for i, t := range specs {
		typ := f.typeOf(t, p.nLayer, p.tied)
		n, err := tensorBytes(t, typ)
		if err != nil {
			return nil, 0, err
		}
		total += n
		out[i] = gguf.WriteTensor{Name: t.name, Type: typ, Shape: t.shape}
	}
	// Chunks finish on many goroutines; the meter serialises the reports.
	var mu sync.Mutex
	var done uint64
	report := func(n uint64) {
		if progress == nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		done += n
		progress(done, total)
	}
	for i, t := range specs {
		typ := out[i].Type
		out[i].Data = func() ([]byte, error) { return tensorData(t, typ, seed, report) }
	}
	return out, total, nil
}

// Resolve maps a model argument to a file. A spec "synth:PRESET[:FTYPE]"
// (FTYPE defaults to q4_k_m) names a synthetic model with seed 0: it is
// generated once into the user cache directory
// (…/vkinfer/synth/PRESET-FTYPE-seed0.gguf) and reused afterwards. Any other
// argument is a path and is returned unchanged.
func Resolve(spec string, progress func(done, total uint64)) (string, error) {
	p, f, err := parseSpec(spec)
	if err != nil || p == nil {
		return spec, err
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("%s: no cache directory for synthetic models: %w", spec, err)
	}
	dir := filepath.Join(cache, "vkinfer", "synth")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("%s: %w", spec, err)
	}
	path := filepath.Join(dir, fmt.Sprintf("%s-%s-seed0.gguf", p.name, f.name))
	switch _, err := os.Stat(path); {
	case err == nil:
		return path, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("%s: %w", spec, err)
	}
	if err := Write(path, p.name, f.name, 0, progress); err != nil {
		return "", err
	}
	return path, nil
}

// IsSpec reports whether a model argument names a preset
// ("synth:PRESET[:FTYPE]") rather than a file.
func IsSpec(s string) bool { return strings.HasPrefix(s, specPrefix) }

// Header returns the header of the file Resolve gives for a
// "synth:PRESET[:FTYPE]" spec (metadata, vocabulary and tensor table, see
// gguf.Header) without generating the file or any weights: for reading a
// preset's shapes.
func Header(spec string) (*gguf.File, error) {
	p, f, err := parseSpec(spec)
	if err != nil {
		return nil, err
	}
	if p == nil {
		return nil, fmt.Errorf("synth: %q names no preset (want %sPRESET[:FTYPE])", spec, specPrefix)
	}
	tensors, _, err := p.plan(f, 0, nil)
	if err != nil {
		return nil, fmt.Errorf("synth: %s %s: %w", p.name, f.name, err)
	}
	kvs, err := p.metadata(f)
	if err != nil {
		return nil, fmt.Errorf("synth: %s: %w", p.name, err)
	}
	return gguf.Header(spec, kvs, tensors)
}

// parseSpec reads "synth:PRESET[:FTYPE]"; the preset is nil for a string
// without the prefix.
func parseSpec(spec string) (*preset, *ftype, error) {
	rest, ok := strings.CutPrefix(spec, specPrefix)
	if !ok {
		return nil, nil, nil
	}
	name, ftype, _ := strings.Cut(rest, ":")
	if ftype == "" {
		ftype = DefaultFtype
	}
	p, err := lookupPreset(name)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", spec, err)
	}
	f, err := lookupFtype(ftype)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", spec, err)
	}
	return p, f, nil
}
