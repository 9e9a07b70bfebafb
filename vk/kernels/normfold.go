package kernels

import (
	"fmt"
	"math"

	"github.com/vkinfer/vkinfer/vk"
)

// NormOut asks a product that writes the residual stream (MatVecQ8Norm
// with a residual) to write as well what the products
// after the RMSNorm of its result need, so that the norm takes no dispatch
// of its own (norm_fold.glsl): the q8 copy of u = dst·W, W the norm's
// weight, and each 32-value block's sum of squares of dst. The products
// of that copy then take NormIn.
type NormOut struct {
	W     vk.Binding // the norm's weight: rows f32 values
	Q8    vk.Binding // the q8 copy of u (QuantizeQ8's layout, Q8Bytes(n, rows))
	Parts vk.Binding // NormPartsBytes(n, rows)
}

// NormIn asks a product of NormOut's q8 copy to scale each column's sums by
// the norm's 1/sqrt(mean(dst²) + Eps), read from the block sums Parts.
type NormIn struct {
	Parts vk.Binding
	Eps   float32
}

// NormPartsBytes is the size of the block sums of n rows of K values.
func NormPartsBytes(n, K int) int64 { return f32(n * K / 32) }

// NormFolds says whether a product of rows x K weights with the built-in
// shape (MatVecQ8For) can take NormOut: its rows (the residual's width)
// whole blocks of 32, which whole workgroups of rows fill.
func (k *Kernels) NormFolds(rows, K int) bool {
	return rows%32 == 0 && FoldRows(k.MatVecQ8For(rows, K).Rows)
}

// FoldRows says whether workgroups of r rows can write a folded norm's
// blocks of 32: r divides 32 (the block's workgroups count themselves
// done) or is a multiple of it (each workgroup finishes its own).
func FoldRows(r int) bool { return r > 0 && (32%r == 0 || r%32 == 0) }

// normRole is what a product's pipeline does for a folded norm: its
// specialization constants (NORM_OUT, NORM_IN, NORM_EPS).
type normRole struct {
	out, in bool
	eps     float32
}

func (r normRole) constants() []uint32 {
	return []uint32{b32(r.out), b32(r.in), math.Float32bits(r.eps)}
}

func roleOf(out *NormOut, in *NormIn) normRole {
	r := normRole{out: out != nil, in: in != nil}
	if in != nil {
		r.eps = in.Eps
	}
	return r
}

// normBindings checks a folded norm's bindings for a product of n columns
// whose residual (out) or input (in) rows are m values wide, and returns
// what the shader's NORM_OUT bindings (weight, q8 copy, counters, sums
// written) and NORM_IN one (sums read) take: placeholders where the role
// is not played.
func (k *Kernels) normBindings(op string, out *NormOut, in *NormIn, n, mOut, mIn int) (outs [4]vk.Binding, parts vk.Binding, err error) {
	if out != nil && in != nil {
		return outs, parts, fmt.Errorf("kernels: %s: a folded norm's product and its consumer in one dispatch", op)
	}
	if out != nil {
		if mOut%32 != 0 {
			return outs, parts, fmt.Errorf("kernels: %s: a folded norm of rows of %d values: need a multiple of 32", op, mOut)
		}
		if err := vec4Aligned(op+" norm weight", out.W); err != nil {
			return outs, parts, err
		}
		for _, c := range []struct {
			what string
			b    vk.Binding
			n    int64
		}{{"norm weight", out.W, f32(mOut)}, {"norm q8", out.Q8, Q8Bytes(n, mOut)}, {"norm sums", out.Parts, NormPartsBytes(n, mOut)}} {
			if err := need(op+" "+c.what, c.b, c.n); err != nil {
				return outs, parts, err
			}
		}
		counts, err := k.counters(n * mOut / 32)
		if err != nil {
			return outs, parts, err
		}
		outs = [4]vk.Binding{out.W, out.Q8, counts, out.Parts}
	} else {
		in, err := k.unusedInput()
		if err != nil {
			return outs, parts, err
		}
		w, err := k.unused()
		if err != nil {
			return outs, parts, err
		}
		outs = [4]vk.Binding{in, w, w, w}
	}
	if in != nil {
		if mIn%32 != 0 {
			return outs, parts, fmt.Errorf("kernels: %s: a folded norm of rows of %d values: need a multiple of 32", op, mIn)
		}
		if err := need(op+" norm sums", in.Parts, NormPartsBytes(n, mIn)); err != nil {
			return outs, parts, err
		}
		parts = in.Parts
	} else if parts, err = k.unusedInput(); err != nil {
		return outs, parts, err
	}
	return outs, parts, nil
}
