package quant

import (
	"bytes"
	"math"
	"os"
	"testing"

	"github.com/ollama/ollama/fs/ggml"
	"github.com/vkinfer/vkinfer/internal/fixtures"
)

// fileTensor is one tensor of a GGUF fixture: its type, shape (ne0 = row
// length first) and bytes.
type fileTensor struct {
	typ   Type
	shape []int
	data  []byte
}

// readTensors reads a GGUF fixture with ollama's fs/ggml reader (not our gguf
// package, which is written and tested separately) and returns its tensors by
// name, with their byte ranges checked against the file.
func readTensors(t *testing.T, rel string) map[string]fileTensor {
	t.Helper()
	raw, err := os.ReadFile(fixtures.Path(t, rel))
	if err != nil {
		t.Fatal(err)
	}
	g, err := ggml.Decode(bytes.NewReader(raw), -1)
	if err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
	ts := g.Tensors()
	out := make(map[string]fileTensor)
	for _, tt := range ts.Items() {
		typ := Type(tt.Kind)
		shape := make([]int, len(tt.Shape))
		rows := 1
		for i, d := range tt.Shape {
			shape[i] = int(d)
			if i > 0 {
				rows *= int(d)
			}
		}
		rowBytes, err := typ.RowBytes(shape[0])
		if err != nil {
			t.Fatalf("%s: tensor %s: %v", rel, tt.Name, err)
		}
		off := ts.Offset + tt.Offset
		end := off + uint64(rowBytes*rows)
		if end > uint64(len(raw)) {
			t.Fatalf("%s: tensor %s [%d, %d) runs past the file (%d bytes)", rel, tt.Name, off, end, len(raw))
		}
		out[tt.Name] = fileTensor{typ, shape, raw[off:end]}
	}
	return out
}

// TestFixtureTensors dequantizes the quantized tensors of the padded
// stories260K models that llama.cpp made (Q8_0, Q6_K, Q4_K_M mix) and
// compares them with the F32 original: this checks our reading of every
// layout against ggml's own writer. The padded models hold the original
// tensor in their top-left corner and zeros elsewhere.
//
// It also quantizes the same padded tensors with our Quantize and requires
// the error to be at most 1% above llama.cpp's on every tensor (measured, see
// the log: Q8_0 5-10% below, Q6_K 2-4% below, Q4_K 1.7% below to 0.2% above;
// llama.cpp optimises a weighted error for the K-quants, we the plain squared
// error), and checks Dot against the dequantized rows.
func TestFixtureTensors(t *testing.T) {
	orig := readTensors(t, "stories260K.gguf")
	// Relative RMS bounds for the llama.cpp files, from the uniform rounding
	// error step/√12 on this data (measured max: Q8_0 0.0062, Q6_K 0.0197,
	// Q4_K 0.078), with headroom.
	bound := map[Type]float64{Q8_0: 0.008, Q6_K: 0.025, Q4_K: 0.095}
	seen := map[Type]int{}
	// Per type: worst llama.cpp error, and the range of our error over theirs.
	worst, lowRatio, highRatio := map[Type]float64{}, map[Type]float64{}, map[Type]float64{}
	for _, file := range []string{
		"derived/stories260K-pad256-q8_0.gguf",
		"derived/stories260K-pad256-q6_k.gguf",
		"derived/stories260K-pad256-q4_k_m.gguf",
	} {
		for name, d := range readTensors(t, file) {
			if d.typ == F32 {
				continue
			}
			o, ok := orig[name]
			if !ok || len(o.shape) != 2 || len(d.shape) != 2 || o.typ != F32 {
				t.Fatalf("%s: %s has no 2-D F32 original", file, name)
			}
			seen[d.typ]++
			c0, r0, c1, r1 := o.shape[0], o.shape[1], d.shape[0], d.shape[1]
			if c1 < c0 || r1 < r0 {
				t.Fatalf("%s: %s shape %v smaller than original %v", file, name, d.shape, o.shape)
			}
			x := make([]float32, c0*r0)
			if err := Dequantize(F32, o.data, x); err != nil {
				t.Fatal(err)
			}
			// The padded original, as llama.cpp saw it.
			pad := make([]float32, c1*r1)
			for r := range r0 {
				copy(pad[r*c1:], x[r*c0:(r+1)*c0])
			}
			got := make([]float32, c1*r1)
			if err := Dequantize(d.typ, d.data, got); err != nil {
				t.Fatalf("%s: %s: %v", file, name, err)
			}
			theirs := relRMS(pad, got)
			if theirs > bound[d.typ] {
				t.Errorf("%s: %s (%v): relative RMS error %.4f > %.3f", file, name, d.typ, theirs, bound[d.typ])
			}
			// Padding: blocks that are all padding must decode to exactly 0;
			// a padded value sharing a sub-block with real ones is off by at
			// most half a level step, which here is below 0.25·RMS.
			rms := math.Sqrt(sumSq(x) / float64(len(x)))
			bs := d.typ.BlockSize()
			for r := range r1 {
				for c := range c1 {
					v := got[r*c1+c]
					switch {
					case r >= r0 || c/bs*bs >= c0:
						if v != 0 {
							t.Fatalf("%s: %s[%d,%d] = %g in an all-padding block, want 0", file, name, r, c, v)
						}
					case c >= c0 && math.Abs(float64(v)) > 0.25*rms:
						t.Errorf("%s: %s[%d,%d] = %g, padding should be ≈0 (RMS %g)", file, name, r, c, v, rms)
					}
				}
			}

			ours, err := Quantize(d.typ, pad)
			if err != nil {
				t.Fatal(err)
			}
			back := make([]float32, len(pad))
			if err := Dequantize(d.typ, ours, back); err != nil {
				t.Fatal(err)
			}
			e := relRMS(pad, back)
			if e > 1.01*theirs {
				t.Errorf("%s: %s (%v): our relative RMS error %.4f vs llama.cpp's %.4f", file, name, d.typ, e, theirs)
			}
			if seen[d.typ] == 1 {
				lowRatio[d.typ], highRatio[d.typ] = e/theirs, e/theirs
			}
			worst[d.typ] = max(worst[d.typ], theirs)
			lowRatio[d.typ], highRatio[d.typ] = min(lowRatio[d.typ], e/theirs), max(highRatio[d.typ], e/theirs)

			rowBytes, _ := d.typ.RowBytes(c1)
			for r := 0; r < r1; r += 7 {
				w := got[r*c1 : (r+1)*c1]
				in := pad[(r%r0)*c1 : (r%r0+1)*c1]
				checkDot(t, d.typ, d.data[r*rowBytes:(r+1)*rowBytes], w, in)
			}
		}
	}
	for typ, n := range seen {
		t.Logf("%v: %d tensors, llama.cpp's relative RMS error ≤ %.4f, ours/theirs %.3f..%.3f", typ, n, worst[typ], lowRatio[typ], highRatio[typ])
	}
	if seen[Q8_0] != 37 || seen[Q6_K] != 37+5 || seen[Q4_K] != 32 {
		t.Errorf("tensors checked per type: %v, want Q8_0 37, Q6_K 42, Q4_K 32", seen)
	}
}
