package quant

import (
	"errors"
	"fmt"
	"math"
)

// ErrUnsupported is wrapped by every error about a type this package has no
// code for (see Type.Supported).
var ErrUnsupported = errors.New("unsupported tensor type")

// Dequantize decodes n = len(dst) values of type t from src into dst. n must
// be a whole number of blocks of t and src must hold exactly the bytes of n
// values (t.RowBytes(n)); anything else, or a type without a decoder, is an
// error and dst is left untouched.
func Dequantize(t Type, src []byte, dst []float32) error {
	var decode func(src []byte, dst []float32)
	switch t {
	case F32:
		decode = dequantizeF32
	case F16:
		decode = dequantizeF16
	case BF16:
		decode = dequantizeBF16
	case Q8_0:
		decode = dequantizeQ8_0
	case Q4_0:
		decode = dequantizeQ4_0
	case Q4_K:
		decode = dequantizeQ4K
	case Q5_K:
		decode = dequantizeQ5K
	case Q6_K:
		decode = dequantizeQ6K
	default:
		return fmt.Errorf("quant: dequantize %s: %w", t, ErrUnsupported)
	}
	want, err := t.RowBytes(len(dst))
	if err != nil {
		return fmt.Errorf("quant: dequantize: %w", err)
	}
	if len(src) != want {
		return fmt.Errorf("quant: dequantize %d %s values needs %d bytes, got %d", len(dst), t, want, len(src))
	}
	decode(src, dst)
	return nil
}

// Dot returns Σ dequant(row)[i]·x[i] over the len(x) values of row, which is
// stored as type t. It is the inner loop of the CPU matmul, so it neither
// allocates nor returns an error: callers guarantee that len(x) is a whole
// number of blocks and len(row) == t.RowBytes(len(x)). When they break that
// contract, or t has no kernel, Dot returns NaN (it never panics and never
// reads past either slice), so the mistake shows in the output instead of
// passing as a plausible number.
//
// Products are summed in float32 within a block (or a 32-value run of a
// plain float row) and the block sums in float64.
func Dot(t Type, row []byte, x []float32) float32 {
	var dot func(row []byte, x []float32) float32
	switch t {
	case F32:
		dot = dotF32
	case F16:
		dot = dotF16
	case BF16:
		dot = dotBF16
	case Q8_0:
		dot = dotQ8_0
	case Q4_0:
		dot = dotQ4_0
	case Q4_K:
		dot = dotQ4K
	case Q5_K:
		dot = dotQ5K
	case Q6_K:
		dot = dotQ6K
	default:
		return float32(math.NaN())
	}
	ti, _ := t.info()
	if len(x)%ti.blockSize != 0 || len(row)/ti.blockBytes != len(x)/ti.blockSize || len(row)%ti.blockBytes != 0 {
		return float32(math.NaN())
	}
	return dot(row, x)
}

// Quantize encodes src as type t. len(src) must be a whole number of blocks.
// Block formats reject NaN and ±Inf inputs and values so large that a block
// scale overflows f16; F16 and BF16 round to nearest even (values beyond the
// F16 range become ±Inf, as a conversion does).
//
// The Q8_0, Q4_0, Q4_K, Q5_K and Q6_K quantizers search each block's scale
// (and min) for the least squared error instead of taking the max-abs scale;
// see fitSymmetric and fitAffine.
func Quantize(t Type, src []float32) ([]byte, error) {
	var encode func(dst []byte, src []float32) error
	switch t {
	case F32:
		encode = quantizeF32
	case F16:
		encode = quantizeF16
	case BF16:
		encode = quantizeBF16
	case Q8_0:
		encode = quantizeQ8_0
	case Q4_0:
		encode = quantizeQ4_0
	case Q4_K:
		encode = quantizeQ4K
	case Q5_K:
		encode = quantizeQ5K
	case Q6_K:
		encode = quantizeQ6K
	default:
		return nil, fmt.Errorf("quant: quantize %s: %w", t, ErrUnsupported)
	}
	n, err := t.RowBytes(len(src))
	if err != nil {
		return nil, fmt.Errorf("quant: quantize: %w", err)
	}
	if t.BlockSize() > 1 {
		for i, v := range src {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return nil, fmt.Errorf("quant: quantize %s: value %d is %v", t, i, v)
			}
		}
	}
	dst := make([]byte, n)
	if err := encode(dst, src); err != nil {
		return nil, fmt.Errorf("quant: quantize %s: %w", t, err)
	}
	return dst, nil
}
