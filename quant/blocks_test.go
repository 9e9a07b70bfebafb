package quant

import (
	"math"
	"testing"
)

// Hand-built blocks: bytes written out by hand (or by a one-line rule stated
// next to them) whose decoded values are worked out independently of the
// package code, including literal spot checks computed on paper.

// decode dequantizes b as typ, failing the test on error.
func decode(t *testing.T, typ Type, b []byte, n int) []float32 {
	t.Helper()
	y := make([]float32, n)
	if err := Dequantize(typ, b, y); err != nil {
		t.Fatal(err)
	}
	return y
}

// expectValues compares decoded values with the expected ones exactly: every
// expected value here is exactly representable and every format computes it
// exactly, so any difference is a layout error.
func expectValues(t *testing.T, typ Type, b []byte, want []float32) {
	t.Helper()
	got := decode(t, typ, b, len(want))
	for i := range want {
		if got[i] != want[i] && !(math.IsNaN(float64(got[i])) && math.IsNaN(float64(want[i]))) {
			t.Fatalf("%v value %d = %g, want %g", typ, i, got[i], want[i])
		}
	}
	x := make([]float32, len(want))
	for i := range x {
		x[i] = float32(i%7) - 2.5
	}
	if !math.IsNaN(float64(sumSq(want))) && !math.IsInf(sumSq(want), 0) {
		checkDot(t, typ, b, want, x)
	}
}

func expectAt(t *testing.T, typ Type, got []float32, spots map[int]float32) {
	t.Helper()
	for i, w := range spots {
		if got[i] != w {
			t.Errorf("%v value %d = %g, want %g (worked by hand)", typ, i, got[i], w)
		}
	}
}

func TestF32Block(t *testing.T) {
	b := []byte{0, 0, 0x80, 0x3f, 0, 0, 0x20, 0xc1, 0xdb, 0x0f, 0x49, 0x40}
	expectValues(t, F32, b, []float32{1, -10, math.Pi})
}

func TestF16Block(t *testing.T) {
	b := []byte{
		0x00, 0x3c, // 1
		0x00, 0xc0, // -2
		0xff, 0x7b, // 65504, the largest finite
		0x01, 0x00, // 2^-24, the smallest subnormal
		0xff, 0x03, // 1023·2^-24, the largest subnormal
		0x00, 0x04, // 2^-14, the smallest normal
		0x00, 0x80, // -0
		0x55, 0x35, // 0x3555 = 1.0100_1010_101b·2^-2 = 0.333251953125
		0x00, 0x7c, // +Inf
		0x00, 0xfc, // -Inf
	}
	want := []float32{1, -2, 65504, 0x1p-24, 1023 * 0x1p-24, 0x1p-14, float32(math.Copysign(0, -1)), 0.333251953125,
		float32(math.Inf(1)), float32(math.Inf(-1))}
	got := decode(t, F16, b, len(want))
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Errorf("F16 value %d = %g, want %g", i, got[i], want[i])
		}
	}
	nan := decode(t, F16, []byte{0x01, 0x7e}, 1)
	if !math.IsNaN(float64(nan[0])) {
		t.Errorf("F16 0x7e01 = %g, want NaN", nan[0])
	}
}

func TestBF16Block(t *testing.T) {
	b := []byte{0x80, 0x3f, 0xa0, 0xc0, 0x49, 0x40, 0x80, 0x7f}
	expectValues(t, BF16, b[:6], []float32{1, -5, 3.140625})
	if y := decode(t, BF16, b, 4); !math.IsInf(float64(y[3]), 1) {
		t.Errorf("BF16 0x7f80 = %g, want +Inf", y[3])
	}
}

func TestQ8_0Block(t *testing.T) {
	// d = 0.25 (f16 0x3400); qs[i] = i - 16 as int8, plus the extremes.
	b := []byte{0x00, 0x34}
	want := make([]float32, 32)
	for i := range 32 {
		q := int8(i - 16)
		switch i {
		case 0:
			q = -128
		case 31:
			q = 127
		}
		b = append(b, byte(q))
		want[i] = 0.25 * float32(q)
	}
	expectValues(t, Q8_0, b, want)
	expectAt(t, Q8_0, decode(t, Q8_0, b, 32), map[int]float32{0: -32, 1: -3.75, 16: 0, 17: 0.25, 31: 31.75})
}

func TestQ4_0Block(t *testing.T) {
	// d = 2 (f16 0x4000); qs[j] = j | (15-j)<<4: value j is (j-8)·2 and value
	// j+16 is (15-j-8)·2.
	b := []byte{0x00, 0x40}
	want := make([]float32, 32)
	for j := range 16 {
		b = append(b, byte(j|(15-j)<<4))
		want[j] = float32(j-8) * 2
		want[j+16] = float32(7-j) * 2
	}
	expectValues(t, Q4_0, b, want)
	expectAt(t, Q4_0, decode(t, Q4_0, b, 32), map[int]float32{0: -16, 8: 0, 15: 14, 16: 14, 31: -16})
}

// kTestScales are the sub-block scales and mins of the hand-built Q4_K and
// Q5_K blocks, chosen to use all six bits (63) and the high bits of pairs
// 4..7 (17, 33, 48, 60, 47 ...), and kTestScaleBytes is their packing worked
// by hand from ggml's get_scale_min_k4 rule:
//
//	bytes 0..3:  sc[j] | (sc[j+4]>>4)<<6   = 1|1<<6, 2|2<<6, 3|3<<6, 63|0<<6
//	bytes 4..7:  mn[j] | (mn[j+4]>>4)<<6   = 0|3<<6, 7|1<<6, 63|0<<6, 1|2<<6
//	bytes 8..11: sc[j+4]&15 | (mn[j+4]&15)<<4 = 1|12<<4, 1|0<<4, 0|2<<4, 5|15<<4
var (
	kTestSc         = [8]uint8{1, 2, 3, 63, 17, 33, 48, 5}
	kTestMn         = [8]uint8{0, 7, 63, 1, 60, 16, 2, 47}
	kTestScaleBytes = [12]byte{0x41, 0x82, 0xc3, 0x3f, 0xc0, 0x47, 0x3f, 0x81, 0xc1, 0x01, 0x20, 0xf5}
)

func TestKScalePacking(t *testing.T) {
	sc, mn := unpackKScales(&kTestScaleBytes)
	if sc != kTestSc || mn != kTestMn {
		t.Fatalf("unpack = %v %v, want %v %v", sc, mn, kTestSc, kTestMn)
	}
	if p := packKScales(&kTestSc, &kTestMn); p != kTestScaleBytes {
		t.Fatalf("pack = % x, want % x", p, kTestScaleBytes)
	}
	// Every 6-bit value in every position survives a round trip.
	for v := range uint8(64) {
		for j := range 8 {
			var sc, mn [8]uint8
			sc[j], mn[(j+3)%8] = v, 63-v
			p := packKScales(&sc, &mn)
			if gs, gm := unpackKScales(&p); gs != sc || gm != mn {
				t.Fatalf("round trip of sc=%v mn=%v gave %v %v", sc, mn, gs, gm)
			}
		}
	}
}

// kTestHeader is d = 0.5 (f16 0x3800), dmin = 0.25 (0x3400) and the scales
// above: sub-block j decodes as 0.5·sc[j]·q − 0.25·mn[j].
func kTestHeader() []byte {
	return append([]byte{0x00, 0x38, 0x00, 0x34}, kTestScaleBytes[:]...)
}

func kTestValue(j int, q int) float32 {
	return 0.5*float32(kTestSc[j])*float32(q) - 0.25*float32(kTestMn[j])
}

func TestQ4KBlock(t *testing.T) {
	// qs[32g+l] = l%16 | (15-l%16)<<4: value 64g+l has level l%16 (low
	// nibble, sub-block 2g), value 64g+32+l has 15-l%16 (high nibble,
	// sub-block 2g+1).
	b := kTestHeader()
	want := make([]float32, 256)
	for g := range 4 {
		for l := range 32 {
			b = append(b, byte(l%16|(15-l%16)<<4))
			want[64*g+l] = kTestValue(2*g, l%16)
			want[64*g+32+l] = kTestValue(2*g+1, 15-l%16)
		}
	}
	expectValues(t, Q4_K, b, want)
	expectAt(t, Q4_K, decode(t, Q4_K, b, 256), map[int]float32{
		0:   0,      // sub 0: sc 1, mn 0, q 0
		5:   2.5,    // 0.5·1·5
		37:  8.25,   // sub 1 (sc 2, mn 7), q 10: 10 − 1.75
		131: 10.5,   // sub 4 (sc 17, mn 60), q 3: 25.5 − 15
		255: -11.75, // sub 7 (sc 5, mn 47), q 0: −11.75
	})
}

func TestQ5KBlock(t *testing.T) {
	// Low nibbles as in TestQ4KBlock; qh[l] = l·37 mod 256, so value v gets
	// 16·bit(v/32) of qh[v%32].
	b := kTestHeader()
	for l := range 32 {
		b = append(b, byte(l*37))
	}
	want := make([]float32, 256)
	for g := range 4 {
		for l := range 32 {
			b = append(b, byte(l%16|(15-l%16)<<4))
			hiLo := int(byte(l*37)>>(2*g)&1) << 4
			hiHi := int(byte(l*37)>>(2*g+1)&1) << 4
			want[64*g+l] = kTestValue(2*g, l%16+hiLo)
			want[64*g+32+l] = kTestValue(2*g+1, 15-l%16+hiHi)
		}
	}
	expectValues(t, Q5_K, b, want)
	// qh[1] = 37 = 0b00100101, qh[2] = 74 = 0b01001010, qh[4] = 148 = 0b10010100.
	expectAt(t, Q5_K, decode(t, Q5_K, b, 256), map[int]float32{
		1:   8.5,    // sub 0 (sc 1, mn 0), q = 1 + 16 (qh[1] bit 0): 0.5·17
		33:  12.25,  // sub 1 (sc 2, mn 7), q = 14 (qh[1] bit 1 clear): 14 − 1.75
		66:  -12.75, // sub 2 (sc 3, mn 63), q = 2 (qh[2] bit 2 clear): 3 − 15.75
		68:  14.25,  // sub 2, q = 4 + 16 (qh[4] bit 2): 30 − 15.75
		226: 20.75,  // sub 7 (sc 5, mn 47), q = 13 (qh[2] bit 7 clear): 32.5 − 11.75
		228: 55.75,  // sub 7, q = 11 + 16 (qh[4] bit 7): 67.5 − 11.75
	})
}

func TestQ6KBlock(t *testing.T) {
	// ql[i] = i, qh[i] = 29·i mod 256, int8 scales below, d = 0.5 (0x3800).
	b := make([]byte, 0, 210)
	for i := range 128 {
		b = append(b, byte(i))
	}
	for i := range 64 {
		b = append(b, byte(29*i))
	}
	scales := []int8{1, -1, 2, -2, 3, -3, 4, -4, 5, -5, 6, -6, 7, -7, 127, -128}
	for _, s := range scales {
		b = append(b, byte(s))
	}
	b = append(b, 0x00, 0x38)
	got := decode(t, Q6_K, b, 256)
	expectAt(t, Q6_K, got, map[int]float32{
		0:   -16,  // ql[0] low 0, qh[0] bits 0-1 = 0: level −32; scale 1
		17:  7.5,  // ql[17] low 1, qh[17] = 237 bits 0-1 = 1: code 17, level −15; scale −1
		33:  17,   // ql[33] low 1, qh[1] = 29 bits 2-3 = 3: code 49, level 17; scale 2
		75:  24,   // ql[11] high 0, qh[11] = 63 bits 4-5 = 3: code 48, level 16; scale 3
		130: 5,    // ql[66] low 2, qh[34] = 218 bits 0-1 = 2: code 34, level 2; scale 5
		224: 381,  // ql[96] high 6, qh[32] = 160 bits 6-7 = 2: code 38, level 6; scale 127
		255: 1600, // ql[127] high 7, qh[63] = 35 bits 6-7 = 0: code 7, level −25; scale −128
	})
	want := make([]float32, 256)
	for v := range want {
		want[v] = float32(refValue(Q6_K, b, v))
	}
	expectValues(t, Q6_K, b, want)
}
