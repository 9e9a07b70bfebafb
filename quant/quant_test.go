package quant

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
)

var supportedTypes = []Type{F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K}

// TestSupportedMatchesKernels keeps the type table honest: every type it
// calls supported has a decoder, a dot kernel and a quantizer, and every
// other known type is refused by all three with ErrUnsupported.
func TestSupportedMatchesKernels(t *testing.T) {
	for id := range Type(64) {
		if !id.Known() {
			continue
		}
		n := 4 * id.BlockSize()
		src := make([]byte, 4*id.BlockBytes())
		dErr := Dequantize(id, src, make([]float32, n))
		_, qErr := Quantize(id, make([]float32, n))
		dot := Dot(id, src, make([]float32, n))
		if id.Supported() {
			if dErr != nil || qErr != nil || dot != 0 {
				t.Errorf("%v is supported but Dequantize=%v Quantize=%v Dot(zeros)=%g", id, dErr, qErr, dot)
			}
		} else if !errors.Is(dErr, ErrUnsupported) || !errors.Is(qErr, ErrUnsupported) || !math.IsNaN(float64(dot)) {
			t.Errorf("%v is unsupported but Dequantize=%v Quantize=%v Dot=%g", id, dErr, qErr, dot)
		}
	}
	for _, typ := range supportedTypes {
		if !typ.Supported() {
			t.Errorf("%v not marked supported", typ)
		}
	}
}

func TestDequantizeRejectsBadSizes(t *testing.T) {
	for _, typ := range supportedTypes {
		bs, bb := typ.BlockSize(), typ.BlockBytes()
		cases := []struct {
			name string
			src  int
			n    int
		}{
			{"short source", 3*bb - 1, 3 * bs},
			{"long source", 3*bb + 1, 3 * bs},
			{"one block too many", 4 * bb, 3 * bs},
			{"partial block", 3 * bb, 3*bs - 1},
		}
		for _, c := range cases {
			if c.n < 0 || (bs == 1 && c.name == "partial block") {
				continue
			}
			dst := make([]float32, c.n)
			for i := range dst {
				dst[i] = 42
			}
			err := Dequantize(typ, make([]byte, c.src), dst)
			if err == nil {
				t.Errorf("%v %s (%d bytes for %d values): no error", typ, c.name, c.src, c.n)
				continue
			}
			if !strings.Contains(err.Error(), typ.String()) {
				t.Errorf("%v %s: error %q does not name the type", typ, c.name, err)
			}
			for i, v := range dst {
				if v != 42 {
					t.Fatalf("%v %s: dst[%d] written (%g) despite the error", typ, c.name, i, v)
				}
			}
		}
		if err := Dequantize(typ, nil, nil); err != nil {
			t.Errorf("%v: empty Dequantize: %v", typ, err)
		}
	}
	if err := Dequantize(Type(200), nil, nil); !errors.Is(err, ErrUnsupported) {
		t.Errorf("unknown type id: %v, want ErrUnsupported", err)
	}
}

// TestDotContractViolations checks that a caller breaking Dot's size
// contract gets NaN, not a panic or a plausible number.
func TestDotContractViolations(t *testing.T) {
	for _, typ := range supportedTypes {
		bs, bb := typ.BlockSize(), typ.BlockBytes()
		x := make([]float32, 3*bs)
		for _, rowLen := range []int{0, 3*bb - 1, 3*bb + 1, 2 * bb, 4 * bb} {
			if got := Dot(typ, make([]byte, rowLen), x); !math.IsNaN(float64(got)) {
				t.Errorf("%v Dot with %d row bytes for %d values = %g, want NaN", typ, rowLen, len(x), got)
			}
		}
		if bs > 1 {
			if got := Dot(typ, make([]byte, 3*bb), x[:len(x)-1]); !math.IsNaN(float64(got)) {
				t.Errorf("%v Dot over a partial block = %g, want NaN", typ, got)
			}
		}
		if got := Dot(typ, nil, nil); got != 0 {
			t.Errorf("%v Dot of empty rows = %g, want 0", typ, got)
		}
	}
	if got := Dot(Type(200), nil, nil); !math.IsNaN(float64(got)) {
		t.Errorf("Dot of an unknown type = %g, want NaN", got)
	}
}

func TestQuantizeRejectsBadInput(t *testing.T) {
	for _, typ := range blockTypes {
		bs := typ.BlockSize()
		if _, err := Quantize(typ, make([]float32, bs+1)); err == nil {
			t.Errorf("%v: %d values (not whole blocks) accepted", typ, bs+1)
		}
		for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
			x := make([]float32, 2*bs)
			x[bs+1] = bad
			if _, err := Quantize(typ, x); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("value %d ", bs+1)) {
				t.Errorf("%v: %g input: err = %v", typ, bad, err)
			}
		}
		// Values whose block scale overflows f16.
		x := make([]float32, bs)
		x[0], x[1] = 3e38, -3e38
		if _, err := Quantize(typ, x); err == nil || !strings.Contains(err.Error(), "f16") {
			t.Errorf("%v: huge values: err = %v, want an f16 overflow error", typ, err)
		}
	}
	if _, err := Quantize(Q2_K, make([]float32, 256)); !errors.Is(err, ErrUnsupported) {
		t.Errorf("Q2_K: %v, want ErrUnsupported", err)
	}
}

func TestTypeTable(t *testing.T) {
	for _, c := range []struct {
		typ          Type
		name         string
		size, nbytes int
	}{
		{F32, "F32", 1, 4}, {F16, "F16", 1, 2}, {BF16, "BF16", 1, 2}, {Q8_0, "Q8_0", 32, 34},
		{Q4_0, "Q4_0", 32, 18}, {Q4_K, "Q4_K", 256, 144}, {Q5_K, "Q5_K", 256, 176}, {Q6_K, "Q6_K", 256, 210},
	} {
		if c.typ.String() != c.name || c.typ.BlockSize() != c.size || c.typ.BlockBytes() != c.nbytes {
			t.Errorf("%d: %s %d %d, want %s %d %d", c.typ, c.typ, c.typ.BlockSize(), c.typ.BlockBytes(), c.name, c.size, c.nbytes)
		}
		if p, ok := ParseType(strings.ToLower(c.name)); !ok || p != c.typ {
			t.Errorf("ParseType(%q) = %v %v", strings.ToLower(c.name), p, ok)
		}
	}
	if Type(5).Known() || Type(5).String() != "type(5)" || Type(5).BlockSize() != 0 || Type(1<<31).Known() {
		t.Error("unassigned ids must be unknown")
	}
	if _, ok := ParseType(""); ok {
		t.Error(`ParseType("") matched an unassigned id`)
	}
	if _, err := Q4_K.RowBytes(100); err == nil {
		t.Error("Q4_K.RowBytes(100) accepted a partial block")
	}
	if _, err := F32.RowBytes(math.MaxInt - 7); err == nil {
		t.Error("F32.RowBytes overflow not reported")
	}
	if _, err := Type(5).RowBytes(0); err == nil {
		t.Error("RowBytes of an unknown type accepted")
	}
}
