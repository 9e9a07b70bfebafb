package tune

import (
	"fmt"
	"slices"
	"strings"

	"github.com/vkinfer/vkinfer/gguf"
	"github.com/vkinfer/vkinfer/model"
	"github.com/vkinfer/vkinfer/quant"
)

// Matrix is one distinct weight shape of a model: Rows x K of Type.
type Matrix struct {
	Rows, K int
	Type    quant.Type
	// Count is how many of the model's matrices have this shape: a
	// forward pass multiplies by each once, so it weighs this shape's
	// time when one geometry is chosen for all of them.
	Count int
	Names []string // tensor names without the block prefix, e.g. ffn_gate
}

func (m Matrix) String() string { return fmt.Sprintf("%dx%d %s", m.Rows, m.K, m.Type) }

// Model is what a sweep measures: the weight shapes and the attention shape.
type Model struct {
	Name                    string
	Matrices                []Matrix
	Heads, KVHeads, HeadDim int
}

// Llama3_8B is the geometry of synth's llama3-8b preset in its Q4_K_M mix
// (llama.cpp's: attn_v and ffn_down are Q6_K in the 16 layers
// use_more_bits picks, output is Q6_K), listed here so that the default
// sweep needs no 4.9 GB file. The token embedding is a row lookup, not a
// matrix product, so it is not listed.
var Llama3_8B = Model{
	Name: "llama3-8b q4_k_m", Heads: 32, KVHeads: 8, HeadDim: 128,
	Matrices: []Matrix{
		{Rows: 4096, K: 4096, Type: quant.Q4_K, Count: 64, Names: []string{"attn_q", "attn_output"}},
		{Rows: 1024, K: 4096, Type: quant.Q4_K, Count: 48, Names: []string{"attn_k", "attn_v"}},
		{Rows: 1024, K: 4096, Type: quant.Q6_K, Count: 16, Names: []string{"attn_v"}},
		{Rows: 14336, K: 4096, Type: quant.Q4_K, Count: 64, Names: []string{"ffn_gate", "ffn_up"}},
		{Rows: 4096, K: 14336, Type: quant.Q4_K, Count: 16, Names: []string{"ffn_down"}},
		{Rows: 4096, K: 14336, Type: quant.Q6_K, Count: 16, Names: []string{"ffn_down"}},
		{Rows: 128256, K: 4096, Type: quant.Q6_K, Count: 1, Names: []string{"output"}},
	},
}

// FromGGUF reads a model's shapes from its tensor table (no tensor data is
// touched): every 2-D weight, except the token embedding when the model has
// a separate output matrix (otherwise the embedding is the output).
func FromGGUF(f *gguf.File) (Model, error) {
	hp, err := model.ReadHParams(f)
	if err != nil {
		return Model{}, err
	}
	m := Model{Name: f.Path(), Heads: hp.Heads, KVHeads: hp.KVHeads, HeadDim: hp.HeadDim}
	_, hasOutput := f.Tensor("output.weight")
	for _, t := range f.Tensors() {
		if len(t.Shape) != 2 || t.Name == "token_embd.weight" && hasOutput {
			continue
		}
		name := strings.TrimSuffix(t.Name, ".weight")
		if rest, ok := strings.CutPrefix(name, "blk."); ok {
			_, name, _ = strings.Cut(rest, ".")
		}
		m.add(Matrix{Rows: int(t.Shape[1]), K: int(t.Shape[0]), Type: t.Type, Count: 1, Names: []string{name}})
	}
	if len(m.Matrices) == 0 {
		return Model{}, fmt.Errorf("%s: no weight matrices", f.Path())
	}
	return m, nil
}

// add merges x into the matrix of the same shape, or appends it.
func (m *Model) add(x Matrix) {
	for i := range m.Matrices {
		y := &m.Matrices[i]
		if y.Rows == x.Rows && y.K == x.K && y.Type == x.Type {
			y.Count += x.Count
			for _, n := range x.Names {
				if !slices.Contains(y.Names, n) {
					y.Names = append(y.Names, n)
				}
			}
			return
		}
	}
	m.Matrices = append(m.Matrices, x)
}

// Capped shrinks every matrix to at most rows x K (K kept a whole number
// of its type's blocks) and merges the shapes that become equal: the quick
// sweep, for software rasterisers and smoke tests.
func (m Model) Capped(rows, K int) Model {
	out := Model{Name: m.Name + fmt.Sprintf(" (capped at %dx%d)", rows, K), Heads: m.Heads, KVHeads: m.KVHeads, HeadDim: m.HeadDim}
	for _, x := range m.Matrices {
		bs := x.Type.BlockSize()
		x.Rows = min(x.Rows, rows)
		x.K = min(x.K, max(bs, K/bs*bs))
		x.Names = slices.Clone(x.Names)
		out.add(x)
	}
	return out
}
