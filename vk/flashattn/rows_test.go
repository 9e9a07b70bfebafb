package flashattn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/x448/float16"

	"github.com/vkinfer/vkinfer/attention"
	"github.com/vkinfer/vkinfer/vk/kernels"
)

// TestFlashAttnRows runs the decode kernel over queries that are one token
// each of their own sequence (Shape.Rows): each row must equal the
// reference of its sequence alone (its region of the caches, its
// position), unsplit and split (a row at position 0 leaves most of its
// splits empty), over a global layer and a sliding window whose ring two
// of the sequences have wrapped.
func TestFlashAttnRows(t *testing.T) {
	d := setup(t)
	const dim, kvHeads, gqa, seqs = 64, 2, 2, 4
	seqOf, posOf := []int32{2, 0, 1}, []int32{40, 0, 17}
	for _, c := range []struct{ ctx, window, splits int }{
		{48, 0, 1}, {48, 0, 3}, {8, 6, 1}, {8, 6, 2},
	} {
		t.Run(fmt.Sprintf("ctx%d/window%d/splits%d", c.ctx, c.window, c.splits), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(c.ctx), uint64(c.splits)))
			n, heads := len(seqOf), gqa*kvHeads
			q := make([]float32, 5*heads*dim) // n rows, or the prefill's 5
			for i := range q {
				q[i] = float32(r.NormFloat64())
			}
			kvd := kvHeads * dim
			k, v := make([]uint16, seqs*c.ctx*kvd), make([]uint16, seqs*c.ctx*kvd)
			for i := range k {
				k[i] = float16.Fromfloat32(float32(r.NormFloat64())).Bits()
				v[i] = float16.Fromfloat32(float32(r.NormFloat64())).Bits()
			}
			fa, err := New(d, Options{Prefs: attention.Prefs{Splits: c.splits}})
			if err != nil {
				t.Fatal(err)
			}
			defer fa.Close()
			sh := Shape{Queries: n, Heads: heads, KVHeads: kvHeads, HeadDim: dim, Context: c.ctx, Window: c.window,
				Scale: float32(1 / math.Sqrt(dim)), Rows: true, Seqs: seqs}
			if p, err := fa.Plan(sh); err != nil || !p.Decode() || p.Splits != c.splits {
				t.Fatalf("plan %v (%v): want the decode kernel with %d splits", p, err, c.splits)
			}
			io := IO{Q: whole(buffer(t, d, f32Bytes(q))), K: whole(buffer(t, d, u16Bytes(k))), V: whole(buffer(t, d, u16Bytes(v))),
				Out: whole(buffer(t, d, make([]byte, 4*len(q)))), Step: whole(buffer(t, d, kernels.AppendRowTable(nil, seqOf, posOf)))}
			if size, err := fa.ScratchBytes(sh); err != nil {
				t.Fatal(err)
			} else if size > 0 {
				io.Scratch = whole(buffer(t, d, make([]byte, size)))
			}
			got := runFA(t, fa, sh, io, n*heads*dim)
			hd := heads * dim
			// The rows again each alone, as one sequence's decode (the
			// step names its sequence), and a prefill of five queries of
			// sequence 3 at 20..24 (4 with the window, which its ring of 8
			// holds with the batch).
			alone := make([]float32, n*hd)
			for i := range n {
				one := sh
				one.Queries, one.Rows, one.Seqs = 1, false, 0
				io1 := io
				io1.Q = whole(buffer(t, d, f32Bytes(q[i*hd:(i+1)*hd])))
				io1.Out = whole(buffer(t, d, make([]byte, 4*hd)))
				io1.Step = whole(buffer(t, d, kernels.AppendRowTable(nil, seqOf[i:i+1], posOf[i:i+1])))
				copy(alone[i*hd:], runFA(t, fa, one, io1, hd))
			}
			pre := sh
			pre.Queries, pre.Rows, pre.Seqs = 5, false, 0
			pre.Window = min(c.window, 4)
			if p, err := fa.Plan(pre); err != nil || p.Decode() {
				t.Fatalf("plan %v (%v): want the prefill kernel", p, err)
			}
			first := 20
			iop := io
			iop.Q = whole(buffer(t, d, f32Bytes(q[:5*hd])))
			iop.Out = whole(buffer(t, d, make([]byte, 4*5*hd)))
			iop.Step = whole(buffer(t, d, kernels.AppendRowTable(nil, []int32{3}, []int32{int32(first)})))
			iop.Scratch = whole(buffer(t, d, make([]byte, 1<<20)))
			region := 3 * c.ctx * kvd
			want, err := attention.Reference(attention.Problem{Queries: 5, Heads: heads, KVHeads: kvHeads, HeadDim: dim,
				Pos: first, Window: pre.Window, Slots: c.ctx, Scale: 1 / math.Sqrt(dim), Q: q[:5*hd],
				K: k[region : region+c.ctx*kvd], V: v[region : region+c.ctx*kvd]})
			if err != nil {
				t.Fatal(err)
			}
			if e := attention.RelErr(runFA(t, fa, pre, iop, 5*hd), want, dim); !(e < 1e-3) {
				t.Errorf("prefill of sequence 3 at %d: relative error %.3e", first, e)
			}
			for i := range n {
				region := int(seqOf[i]) * c.ctx * kvd
				want, err := attention.Reference(attention.Problem{Queries: 1, Heads: heads, KVHeads: kvHeads, HeadDim: dim,
					Pos: int(posOf[i]), Window: c.window, Slots: c.ctx, Scale: 1 / math.Sqrt(dim), Q: q[i*hd : (i+1)*hd],
					K: k[region : region+c.ctx*kvd], V: v[region : region+c.ctx*kvd]})
				if err != nil {
					t.Fatal(err)
				}
				if e := attention.RelErr(got[i*hd:(i+1)*hd], want, dim); !(e < 1e-3) {
					t.Errorf("row %d (sequence %d at %d): relative error %.3e", i, seqOf[i], posOf[i], e)
				}
				if e := attention.RelErr(alone[i*hd:(i+1)*hd], want, dim); !(e < 1e-3) {
					t.Errorf("row %d (sequence %d at %d) alone: relative error %.3e", i, seqOf[i], posOf[i], e)
				}
			}
		})
	}
}

// runFA records and runs one attention and returns the n values of its
// output.
func runFA(t *testing.T, fa *FlashAttn, sh Shape, io IO, n int) []float32 {
	t.Helper()
	s := fa.d.NewSequence()
	defer s.Free()
	if err := fa.Record(s, io, sh); err != nil {
		t.Fatal(err)
	}
	if err := s.End(); err != nil {
		t.Fatal(err)
	}
	if err := s.Run(); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, n)
	if err := io.Out.Buf.ReadF32(0, got); err != nil {
		t.Fatal(err)
	}
	return got
}
