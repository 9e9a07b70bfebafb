package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/vkinfer/vkinfer/quant"
	"github.com/vkinfer/vkinfer/vk"
)

// normFoldRef checks what a NormOut product wrote for n columns of m
// values (dst, its q8 copy qraw and block sums parts, nw the norm's
// weight) and returns the rounded u = dst·nw the products after it read
// and each column's 1/rms, in float64 from dst as written.
func normFoldRef(t *testing.T, dst, nw []float32, qraw []byte, parts []float32, n, m int, eps float32) ([]float32, []float64) {
	t.Helper()
	u := make([]float32, n*m)
	for i := range u {
		u[i] = dst[i] * nw[i%m] // the shader's f32 product
	}
	uq := q8Values(t, qraw, u, n, m)
	s := make([]float64, n)
	for c := range n {
		var ss, ps float64
		for _, v := range dst[c*m : (c+1)*m] {
			ss += float64(v) * float64(v)
		}
		for _, p := range parts[c*m/32 : (c+1)*m/32] {
			ps += float64(p)
		}
		if math.Abs(ps-ss) > 1e-5*ss {
			t.Errorf("column %d: block sums of squares add to %g, want %g", c, ps, ss)
		}
		s[c] = 1 / math.Sqrt(ss/float64(m)+float64(eps))
	}
	return uq, s
}

// scaledRef is matRef of x's n columns, each column's results and
// magnitudes times s.
func scaledRef(deq, x []float32, s []float64, n, rows, K int) (want, scale []float64) {
	want, scale = matRef(deq, x, n, rows, K)
	for i := range want {
		want[i] *= s[i/rows]
		scale[i] *= s[i/rows]
	}
	return want, scale
}

// TestNormFold checks an RMSNorm folded into the products around it
// (norm_fold.glsl) against float64: a product adding into a residual
// writes the residual, the q8 copy of residual·weight and the block sums
// of squares (NormOut, workgroups of 1 to 32 rows, 1 to 8 columns); a
// plain product and a stack of two matrices (one of another K-quant) read
// that copy and scale by 1/rms (NormIn), against the products of the
// copy's rounded values. Each case runs twice in one submission, so a
// counter left dirty fails the second.
func TestNormFold(t *testing.T) {
	k := setup(t)
	if !k.info.IntegerDot {
		t.Skip("no integer dot products: the fold's copy is in 8 bits")
	}
	const eps = 1e-5
	for i, c := range []struct {
		n, m, k1, m2 int
		t2           quant.Type
		sh           MatVecShape
	}{
		{1, 256, 512, 96, quant.Q4_K, MatVecShape{}},
		{3, 512, 256, 200, quant.Q6_K, MatVecShape{Lanes: 64, Rows: 4, Unroll: 1}},
		{8, 256, 256, 40, quant.Q5_K, MatVecShape{Lanes: 32, Rows: 32, Unroll: 2}},
		{2, 1024, 256, 33, quant.Q4_K, MatVecShape{Lanes: 64, Rows: 1, Unroll: 1}},
		{5, 256, 768, 64, quant.Q8_0, MatVecShape{Lanes: 128, Rows: 8, Unroll: 1}},
	} {
		sh := c.sh
		if sh == (MatVecShape{}) {
			sh = k.MatVecQ8For(c.m, c.k1)
		}
		t.Run(fmt.Sprintf("n%d/%dx%d/%s/then%dx%d%s", c.n, c.m, c.k1, sh, c.m2, c.m, c.t2), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(i), 29))
			raw1, deq1 := quantized(t, r, quant.Q4_K, c.m, c.k1)
			raw2, deq2 := quantized(t, r, c.t2, c.m2, c.m)
			raw3, deq3 := quantized(t, r, quant.Q6_K, 24, c.m)
			if c.t2 == quant.Q8_0 { // a stack mixes K-quants only
				raw3, deq3 = quantized(t, r, quant.Q8_0, 24, c.m)
			}
			x := normals(r, c.n*c.k1, 1)
			xq := q8Values(t, quantizeOnGPU(t, k, x, c.n, c.k1), x, c.n, c.k1)
			res := normals(r, c.n*c.m, 2)
			nw := normals(r, c.m, 0.5)
			for j := range nw {
				nw[j] += 1
			}
			xb, rb, nwb := floatBuffer(t, x), floatBuffer(t, res), floatBuffer(t, nw)
			xqb, qb := buffer(t, Q8Bytes(c.n, c.k1), nil), buffer(t, Q8Bytes(c.n, c.m), nil)
			pb := buffer(t, NormPartsBytes(c.n, c.m), nil)
			yb, sb, s3b := buffer(t, f32(c.n*c.m2), nil), buffer(t, f32(c.n*c.m2), nil), buffer(t, f32(c.n*24), nil)
			stackW := append(append([]byte{}, raw2...), make([]byte, -len(raw2)&255)...)
			off3 := int64(len(stackW))
			wsb := buffer(t, off3+int64(len(raw3)), append(stackW, raw3...))
			w1, w2 := weightsAt(t, raw1, 256), weightsAt(t, raw2, 256)
			st := Stack{Type: c.t2, N: c.n, K: c.m, X: whole(qb), Q8: true,
				Mats: []StackMat{{W: vk.Binding{Buf: wsb, Size: int64(len(raw2))}, Rows: c.m2, Out: whole(sb)},
					{W: vk.Binding{Buf: wsb, Off: off3, Size: int64(len(raw3))}, Rows: 24, Out: whole(s3b)}}}
			if c.t2 != quant.Q8_0 {
				st.LastType = quant.Q6_K
			}
			in := &NormIn{Parts: whole(pb), Eps: eps}
			st.NormIn = in
			for round := range 2 {
				if round == 1 {
					// The second pass starts from the first's residual.
					res = read(t, rb, 0, c.n*c.m)
				}
				run(t, func(s *vk.Sequence) error {
					if err := k.QuantizeQ8(s, whole(xqb), whole(xb), c.n, c.k1); err != nil {
						return err
					}
					s.Barrier()
					out := &NormOut{W: whole(nwb), Q8: whole(qb), Parts: whole(pb)}
					if err := k.MatVecQ8Norm(s, whole(rb), w1, whole(xqb), &vk.Binding{Buf: rb}, quant.Q4_K, c.n, c.m, c.k1, sh, out, nil); err != nil {
						return err
					}
					s.Barrier()
					if err := k.MatVecQ8Norm(s, whole(yb), w2, whole(qb), nil, c.t2, c.n, c.m2, c.m, k.MatVecQ8For(c.m2, c.m), nil, in); err != nil {
						return err
					}
					return k.MatVecStack(s, st)
				})
				want, scale := matRef(deq1, xq, c.n, c.m, c.k1)
				for j := range want {
					want[j] += float64(res[j])
					scale[j] += math.Abs(float64(res[j]))
				}
				dst := read(t, rb, 0, c.n*c.m)
				compare(t, "residual", dst, want, scale, dotTol(c.k1))
				qraw := make([]byte, Q8Bytes(c.n, c.m))
				if err := qb.Read(0, qraw); err != nil {
					t.Fatal(err)
				}
				uq, sc := normFoldRef(t, dst, nw, qraw, read(t, pb, 0, c.n*c.m/32), c.n, c.m, eps)
				// Beyond the dot product, 1/rms is a few roundings off.
				tol := dotTol(c.m) + 8*eps32
				want, scale = scaledRef(deq2, uq, sc, c.n, c.m2, c.m)
				compare(t, "product", read(t, yb, 0, c.n*c.m2), want, scale, tol)
				compare(t, "stack", read(t, sb, 0, c.n*c.m2), want, scale, tol)
				want, scale = scaledRef(deq3, uq, sc, c.n, 24, c.m)
				compare(t, "stack's second matrix", read(t, s3b, 0, c.n*24), want, scale, tol)
			}
		})
	}
	// One buffer large enough for every operand, so that each call is
	// refused for the reason it names and for no other.
	d := whole(buffer(t, 1<<20, nil))
	out := &NormOut{W: d, Q8: d, Parts: d}
	for _, c := range []struct {
		name, why string
		err       error
	}{
		{"a fold without a residual", "needs the residual",
			k.MatVecQ8Norm(nil, d, d, d, nil, quant.Q4_K, 1, 32, 256, k.MatVecQ8For(32, 256), out, nil)},
		{"both roles", "in one dispatch",
			k.MatVecQ8Norm(nil, d, d, d, &d, quant.Q4_K, 1, 32, 256, k.MatVecQ8For(32, 256), out, &NormIn{Parts: d})},
		{"3 rows a workgroup", "rows a workgroup",
			k.MatVecQ8Norm(nil, d, d, d, &d, quant.Q4_K, 1, 96, 256, MatVecShape{Lanes: 32, Rows: 3, Unroll: 1}, out, nil)},
		{"rows of 48", "multiple of 32",
			k.MatVecQ8Norm(nil, d, d, d, &d, quant.Q4_K, 1, 48, 256, MatVecShape{Lanes: 32, Rows: 4, Unroll: 1}, out, nil)},
		{"a stack in f32", "in 8 bits",
			k.MatVecStack(nil, Stack{Type: quant.Q4_K, N: 1, K: 256, X: d, NormIn: &NormIn{Parts: d}, Mats: []StackMat{{W: d, Rows: 32, Out: d}}})},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.why) {
			t.Errorf("%s: got %v, want a refusal for %q", c.name, c.err, c.why)
		}
	}
}
