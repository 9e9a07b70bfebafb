package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/vkinfer/vkinfer/quant"
	"github.com/vkinfer/vkinfer/vk"
)

// TestMatVecAddNorm checks the product with its residual and the folded
// RMS norm against float64 references: awkward row counts and workgroup
// counts (rows/ROWS rounded up: 400, 33, 84, 37, 151), f32 and 8-bit
// activations, the norm's f32 output with and without its 8-bit copy, the
// residual in place (x += W·a, as decode records it) and the norm in place
// (the output norm). Each case runs 13 times in one submission: the
// in-place residual accumulates, so a norm left to a
// workgroup other than the last, or skipped, is seen; the recording then
// runs again, so that a counter left dirty is seen too.
func TestMatVecAddNorm(t *testing.T) {
	k := setup(t)
	type normCase struct {
		qt       quant.Type
		K, rows  int
		shape    MatVecShape
		q8Out    bool
		resPlace bool // r is dst: x accumulates over the repeats
		normOnX  bool // the norm's output is dst itself
	}
	cases := []normCase{
		{quant.Q4_K, 512, 800, MatVecShape{Lanes: 64, Rows: 2, Unroll: 1}, true, true, false},
		{quant.Q6_K, 256, 99, MatVecShape{Lanes: 32, Rows: 3, Unroll: 1}, false, true, false},
		{quant.Q8_0, 160, 416, MatVecShape{Lanes: 128, Rows: 5, Unroll: 2}, true, false, true},
		{quant.F16, 100, 37, MatVecShape{Lanes: 16, Rows: 1, Unroll: 1}, false, false, false},
		{quant.Q4_0, 96, 1056, MatVecShape{Lanes: 64, Rows: 7, Unroll: 1}, true, true, false},
	}
	for _, w := range requiredWaves(t, k) {
		cases = append(cases, normCase{quant.Q4_K, 256, 96, MatVecShape{Lanes: 64, Rows: 2, Unroll: 1, Wave: w}, true, true, false})
	}
	for i, c := range cases {
		for _, q8 := range []bool{false, true} {
			if q8 && (!HasQ8(c.qt) || !k.info.IntegerDot) {
				continue
			}
			t.Run(fmt.Sprintf("%d/%s/K%d/rows%d/q8=%v", i, c.qt, c.K, c.rows, q8), func(t *testing.T) {
				testMatVecAddNorm(t, k, c.qt, c.K, c.rows, c.shape, q8, c.q8Out, c.resPlace, c.normOnX)
			})
		}
	}
}

func testMatVecAddNorm(t *testing.T, k *Kernels, qt quant.Type, K, rows int, sh MatVecShape, q8, q8Out, resPlace, normOnX bool) {
	r := rand.New(rand.NewPCG(uint64(K), uint64(rows)))
	ws, deqs := stackWeights(t, r, qt, K, []int{rows})
	xb, x := stackX(t, k, r, 1, K, q8)
	prod, pScale := matRef(deqs[0], x, 1, rows, K)
	const eps, repeats = 1e-5, 13
	// dst sits 64 bytes into its buffer, so binding offsets are exercised.
	db := buffer(t, 64+f32(rows), nil)
	dst := vk.Binding{Buf: db, Off: 64, Size: f32(rows)}
	rb, gb := dst, whole(buffer(t, f32(rows), nil))
	if !resPlace {
		rb = whole(buffer(t, f32(rows), nil))
	}
	hb := whole(buffer(t, f32(rows), nil))
	if normOnX {
		hb = dst
	}
	nm := FoldNorm{W: gb, Out: hb, Eps: eps}
	var qb vk.Binding
	if q8Out {
		qb = whole(buffer(t, Q8Bytes(1, rows), nil))
		nm.Q8 = &qb
	}
	s := kern.dev.NewSequence()
	defer s.Free()
	for i := range repeats {
		if i > 0 {
			s.Barrier()
		}
		if err := k.MatVecAddNorm(s, dst, ws[0], xb, rb, q8, qt, rows, K, sh, nm); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.End(); err != nil {
		t.Fatal(err)
	}
	// The recording runs twice with new residuals and norm weights: a
	// counter its first run left dirty would leave the second run's norm
	// undone (or done early), and its output the first run's.
	for range 2 {
		res := normals(r, rows, 1)
		gain := normals(r, rows, 0.2)
		for i := range gain {
			gain[i] += 1
		}
		for _, w := range []struct {
			b vk.Binding
			v []float32
		}{{rb, res}, {dst, res}, {gb, gain}} {
			if err := w.b.Buf.Write(w.b.Off, f32Bytes(w.v)); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Run(); err != nil {
			t.Fatal(err)
		}
		// The reference: x = res + repeats·(W·a) with the residual in
		// place, else res + W·a; the norm of that.
		n := 1.0
		if resPlace {
			n = repeats
		}
		xw, xtol := make([]float64, rows), make([]float64, rows)
		var ss, ssTol float64
		for i := range xw {
			xw[i] = float64(res[i]) + n*prod[i]
			xtol[i] = dotTol(K)*n*pScale[i] + n*eps32*math.Abs(xw[i]) + 1e-30
			ss += xw[i] * xw[i]
			ssTol += 2 * math.Abs(xw[i]) * xtol[i]
		}
		scale := 1 / math.Sqrt(ss/float64(rows)+eps)
		// The scale's relative error: half that of the sum of squares,
		// plus the rounding of a sum of rows terms.
		relS := ssTol/(2*ss) + 4*math.Sqrt(float64(rows))*eps32
		hw, htol := make([]float64, rows), make([]float64, rows)
		for i := range hw {
			hw[i] = xw[i] * scale * float64(gain[i])
			htol[i] = math.Abs(scale*float64(gain[i]))*(xtol[i]+math.Abs(xw[i])*relS) + 4*eps32*math.Abs(hw[i]) + 1e-30
		}
		if !normOnX {
			compare(t, "x", read(t, db, 64, rows), xw, xtol, 1)
		}
		got := read(t, hb.Buf, hb.Off, rows)
		compare(t, "norm", got, hw, htol, 1)
		if q8Out {
			q8Values(t, readBytes(t, qb.Buf), got, 1, rows)
		}
	}
}

// TestMatVecAddNormRejects: folds the kernel cannot run give errors.
func TestMatVecAddNormRejects(t *testing.T) {
	k := setup(t)
	buf := whole(buffer(t, 1<<16, nil))
	sh := MatVecShape{Lanes: 32, Rows: 2, Unroll: 1}
	for name, rec := range map[string]func() error{
		"q8 copy of partial blocks": func() error {
			return k.MatVecAddNorm(nil, buf, buf, buf, buf, false, quant.Q8_0, 48, 32, sh, FoldNorm{W: buf, Out: buf, Q8: &buf})
		},
		"short norm weights": func() error {
			w := vk.Binding{Buf: buf.Buf, Size: 4 * 63}
			return k.MatVecAddNorm(nil, buf, buf, buf, buf, false, quant.Q8_0, 64, 32, sh, FoldNorm{W: w, Out: buf})
		},
		"q8 activations of f16 weights": func() error {
			return k.MatVecAddNorm(nil, buf, buf, buf, buf, true, quant.F16, 64, 32, sh, FoldNorm{W: buf, Out: buf})
		},
		"no lanes": func() error {
			return k.MatVecAddNorm(nil, buf, buf, buf, buf, false, quant.Q8_0, 64, 32, MatVecShape{Rows: 2, Unroll: 1}, FoldNorm{W: buf, Out: buf})
		},
	} {
		if err := rec(); err == nil {
			t.Errorf("%s: accepted", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}
