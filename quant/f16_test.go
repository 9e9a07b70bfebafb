package quant

import (
	"math"
	"testing"

	"github.com/x448/float16"
)

// TestHalfToFloatExhaustive compares the fast conversion with x448/float16
// on all 65536 bit patterns, bit for bit except for NaNs, where float16 sets
// the quiet bit and halfToFloat keeps the payload as it is: both must be NaN
// of the same sign.
func TestHalfToFloatExhaustive(t *testing.T) {
	for h := range 1 << 16 {
		got, want := halfToFloat(uint16(h)), float16.Frombits(uint16(h)).Float32()
		if math.IsNaN(float64(want)) {
			if !math.IsNaN(float64(got)) || math.Signbit(float64(got)) != math.Signbit(float64(want)) {
				t.Fatalf("halfToFloat(%#04x) = %g, want a NaN of the same sign", h, got)
			}
			continue
		}
		if math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("halfToFloat(%#04x) = %g (%#08x), want %g (%#08x)", h, got, math.Float32bits(got), want, math.Float32bits(want))
		}
	}
}

// TestF16RoundTripAllValues: every finite binary16 survives F16 Quantize.
func TestF16RoundTripAllValues(t *testing.T) {
	var x []float32
	for h := range 1 << 16 {
		if h&0x7c00 != 0x7c00 {
			x = append(x, halfToFloat(uint16(h)))
		}
	}
	y := roundTrip(t, F16, x)
	for i := range x {
		if math.Float32bits(x[i]) != math.Float32bits(y[i]) {
			t.Fatalf("%g round-trips to %g", x[i], y[i])
		}
	}
}

func TestFloatToBF16Rounding(t *testing.T) {
	for _, c := range []struct {
		in   uint32
		want uint16
	}{
		{0x3f800000, 0x3f80}, // 1
		{0x3f808000, 0x3f80}, // halfway, even stays
		{0x3f818000, 0x3f82}, // halfway, odd rounds up
		{0x3f808001, 0x3f81}, // above halfway
		{0x3f807fff, 0x3f80}, // below halfway
		{0xbf808001, 0xbf81}, // sign kept
		{0x7f7fffff, 0x7f80}, // max float rounds to Inf, as the nearest bf16 is
		{0x7f800000, 0x7f80}, // Inf
		{0x7f800001, 0x7fc0}, // signalling NaN with a low payload stays NaN
		{0xffc00000, 0xffc0},
	} {
		if got := floatToBF16(math.Float32frombits(c.in)); got != c.want {
			t.Errorf("floatToBF16(%#08x) = %#04x, want %#04x", c.in, got, c.want)
		}
	}
}
