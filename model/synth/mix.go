package synth

import (
	"fmt"
	"strings"

	"github.com/vkinfer/vkinfer/quant"
)

// ftype is a type mix: the type of the 2-D tensors, and whether the mix
// upgrades some of them the way llama.cpp's _M variants do.
type ftype struct {
	name     string
	fileType uint32     // general.file_type (llama_ftype)
	base     quant.Type // type of every 2-D tensor without a special rule
	kMix     bool       // apply llama.cpp's Q4_K_M upgrades (output, attn_v, ffn_down)
}

var ftypes = []ftype{
	{name: "q4_k_m", fileType: 15, base: quant.Q4_K, kMix: true},
	{name: "q8_0", fileType: 7, base: quant.Q8_0},
	{name: "f16", fileType: 1, base: quant.F16},
}

// Ftypes lists the type mixes Write and Resolve accept.
func Ftypes() []string {
	names := make([]string, len(ftypes))
	for i, f := range ftypes {
		names[i] = f.name
	}
	return names
}

func lookupFtype(name string) (*ftype, error) {
	for i := range ftypes {
		if strings.EqualFold(ftypes[i].name, name) {
			return &ftypes[i], nil
		}
	}
	return nil, fmt.Errorf("unknown ftype %q (valid: %s)", name, strings.Join(Ftypes(), ", "))
}

// typeOf chooses the type of t in a model of nLayer blocks, following
// llama_tensor_get_type (llama.cpp, src/llama-quant.cpp) for the cases our
// presets reach: 1-D tensors stay F32; in Q4_K_M the output (or, with tied
// embeddings, token_embd, which then serves as the output) is Q6_K, and attn_v
// and ffn_down are Q6_K in the layers use_more_bits picks. A mixture of
// experts changes nothing for 128 experts: the stacked ffn_down_exps is an
// ffn_down (its layer read from its name), ffn_gate_exps and ffn_up_exps
// plain matrices, and the router stays F32 (the converter writes
// ffn_gate_inp in F32 and the quantizer skips it). llama.cpp's extra rules
// for exactly 8 experts (attn_k and attn_v Q8_0, attn_output Q5_K) are not
// implemented: no preset has 8.
func (f *ftype) typeOf(t tensorSpec, nLayer int, tied bool) quant.Type {
	if len(t.shape) == 1 || t.kind == kindRouter {
		return quant.F32
	}
	typ := f.base
	if f.kMix {
		switch {
		case t.kind == kindOutput || t.kind == kindEmbed && tied:
			typ = quant.Q6_K
		case (t.kind == kindAttnV || t.kind == kindFFNDown) && useMoreBits(t.layer, nLayer):
			typ = quant.Q6_K
		}
	}
	return fallback(typ, t.shape[0])
}

// useMoreBits is llama.cpp's use_more_bits: the first and last eighth of the
// layers, and every third layer in between.
func useMoreBits(i, n int) bool {
	return i < n/8 || i >= 7*n/8 || (i-n/8)%3 == 2
}

// fallback replaces typ when rows of ne0 values are not a whole number of its
// blocks (qwen2.5-0.5b: n_embd 896 is not a multiple of 256). llama.cpp falls
// back from Q4_K to Q5_0 and from Q6_K to Q8_0; we implement no Q5_0, so both
// become Q8_0 here, which keeps the file loadable and only makes those tensors
// larger. Like llama.cpp, a row that does not fit Q8_0's 32 values either is F16.
func fallback(typ quant.Type, ne0 uint64) quant.Type {
	if ne0%uint64(typ.BlockSize()) == 0 {
		return typ
	}
	if ne0%uint64(quant.Q8_0.BlockSize()) == 0 {
		return quant.Q8_0
	}
	return quant.F16
}
