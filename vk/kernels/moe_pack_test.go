package kernels_test

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/vkinfer/vkinfer/backend/cpu"
	"github.com/vkinfer/vkinfer/gguf"
	"github.com/vkinfer/vkinfer/internal/golden"
	"github.com/vkinfer/vkinfer/model/synth"
	"github.com/vkinfer/vkinfer/vk/kernels"
)

// topK is each token's k largest logits' experts (ties to the lower index),
// as the router chooses them: softmax keeps the order.
func topK(logits []float32, experts, k int) []int {
	var ids []int
	order := make([]int, experts)
	for i := 0; i < len(logits); i += experts {
		row := logits[i : i+experts]
		for e := range order {
			order[e] = e
		}
		slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(row[b], row[a]) })
		ids = append(ids, order[:k]...)
	}
	return ids
}

// routing is one batch's expert choices.
type routing struct {
	name       string
	ids        []int
	experts, k int
}

// synthRoutings are the router's choices in every layer of tiny-qwen3moe
// (16 experts, 4 used) for a batch of 512 random tokens, through the CPU
// engine.
func synthRoutings(t *testing.T) []routing {
	path := filepath.Join(t.TempDir(), "moe.gguf")
	if err := synth.Write(path, "tiny-qwen3moe", "q4_k_m", 7, nil); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := rand.New(rand.NewPCG(3, 4))
	tokens := make([]int32, 512)
	for i := range tokens {
		tokens[i] = int32(r.IntN(990))
	}
	routes, err := golden.Routes(f, cpu.New(2), tokens)
	if err != nil {
		t.Fatal(err)
	}
	var out []routing
	for l, rt := range routes {
		out = append(out, routing{fmt.Sprintf("tiny-qwen3moe layer %d, 512 tokens", l), topK(rt.Logits, rt.Experts, rt.K), rt.Experts, rt.K})
	}
	return out
}

// gumbelRouting draws n tokens' top k of experts whose logits are
// log-popularity plus Gumbel noise: each token's first choice follows the
// popularity, and the k are distinct.
func gumbelRouting(r *rand.Rand, name string, n, experts, k int, logPop func(e int) float64) routing {
	logits := make([]float32, n*experts)
	for i := range logits {
		logits[i] = float32(logPop(i%experts) - math.Log(-math.Log(r.Float64())))
	}
	return routing{name, topK(logits, experts, k), experts, k}
}

// TestPackPadding measures the padding rows of the packed cut against the
// naive one (each expert's last tile padded to the full height) on real
// router distributions of the synthetic model and on skewed ones, and
// checks that every cut covers each pair once, in tiles of one expert.
// It also reports what the device does (moe_sort's list is the naive cut
// at the product's BN): the cooperative-matrix product's tiles of 64
// (MoECoopTile), whose subgroups skip the fragments of 16 columns past a
// tile's pairs, so that the matrix units' padding is the naive cut's at
// 16; and the 8-bit product's tiles of 32 (MoETileQ8 for 512 tokens over
// 128 experts).
func TestPackPadding(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	cases := synthRoutings(t)
	uniform := func(int) float64 { return 0 }
	cases = append(cases,
		gumbelRouting(r, "random router 128/8, 512 tokens", 512, 128, 8, uniform),
		gumbelRouting(r, "random router 128/8, 37 tokens", 37, 128, 8, uniform),
		gumbelRouting(r, "Zipf 1.2 over 128/8, 512 tokens", 512, 128, 8, func(e int) float64 { return -1.2 * math.Log(float64(e+1)) }),
		gumbelRouting(r, "one hot expert (+8 nats) 128/8, 512 tokens", 512, 128, 8, func(e int) float64 { return map[bool]float64{true: 8}[e == 3] }),
		gumbelRouting(r, "16 of 128 experts live, 512 tokens", 512, 128, 8, func(e int) float64 { return map[bool]float64{true: -30}[e >= 16] }),
	)
	for _, c := range cases {
		pad := func(h int) (float64, int) {
			p, err := kernels.PackByExpert(c.ids, c.experts, h, 1, true)
			if err != nil {
				t.Fatal(err)
			}
			checkPack(t, c, p, h, 1)
			pr, rows := p.Padding()
			return 100 * float64(pr) / float64(rows), len(p.Tiles)
		}
		tiles64, n64 := pad(64)
		frag16, _ := pad(16)
		tiles32, n32 := pad(32)
		t.Logf("%-44s device: %d coop tiles of 64, %5.1f%% of their fragments' columns padding (%5.1f%% of the tiles' rows); %d 8-bit tiles of 32, %5.1f%% padding",
			c.name, n64, frag16, tiles64, n32, tiles32)
		for _, h := range [][2]int{{64, 8}, {32, 8}, {64, 16}} {
			naive, err := kernels.PackByExpert(c.ids, c.experts, h[0], h[1], true)
			if err != nil {
				t.Fatal(err)
			}
			packed, err := kernels.PackByExpert(c.ids, c.experts, h[0], h[1], false)
			if err != nil {
				t.Fatal(err)
			}
			checkPack(t, c, naive, h[0], h[0])
			checkPack(t, c, packed, h[0], h[1])
			np, nrows := naive.Padding()
			pp, prows := packed.Padding()
			chosen := 0
			for e := range c.experts {
				if packed.Offsets[e+1] > packed.Offsets[e] {
					chosen++
				}
			}
			if pp > np || pp >= h[1]*chosen {
				t.Errorf("%s, heights %d..%d: %d padding rows packed, %d naive, %d experts chosen", c.name, h[1], h[0], pp, np, chosen)
			}
			t.Logf("%-44s tiles %2d..%2d: padding %5.1f%% naive (%d tiles), %5.1f%% packed (%d tiles); %d experts chosen",
				c.name, h[1], h[0], 100*float64(np)/float64(nrows), len(naive.Tiles), 100*float64(pp)/float64(prows), len(packed.Tiles), chosen)
		}
	}
}

// checkPack checks that p sorts c's pairs by expert (ascending pair index
// within one) and that its tiles, of heights minH..maxH, cover every
// expert's run exactly, in order.
func checkPack(t *testing.T, c routing, p *kernels.ExpertPack, maxH, minH int) {
	t.Helper()
	if len(p.Perm) != len(c.ids) || p.Offsets[c.experts] != len(c.ids) {
		t.Fatalf("%s: %d pairs sorted of %d", c.name, len(p.Perm), len(c.ids))
	}
	seen := make([]bool, len(c.ids))
	for e := range c.experts {
		run := p.Perm[p.Offsets[e]:p.Offsets[e+1]]
		for j, i := range run {
			if seen[i] || c.ids[i] != e || j > 0 && run[j-1] >= i {
				t.Fatalf("%s: expert %d's run %v", c.name, e, run)
			}
			seen[i] = true
		}
	}
	next := slices.Clone(p.Offsets)
	for _, tl := range p.Tiles {
		if tl.Start != next[tl.Expert] || tl.Rows < 1 || tl.Rows > tl.Height || tl.Height > maxH || tl.Height < minH ||
			tl.Height&(tl.Height-1) != 0 && tl.Height != maxH || tl.Start+tl.Rows > p.Offsets[tl.Expert+1] {
			t.Fatalf("%s: tile %+v (expert's next pair %d)", c.name, tl, next[tl.Expert])
		}
		next[tl.Expert] += tl.Rows
	}
	if !slices.Equal(next[:c.experts], p.Offsets[1:]) {
		t.Fatalf("%s: tiles end at %v, runs at %v", c.name, next[:c.experts], p.Offsets[1:])
	}
}

// TestPackByExpertErrors: bad heights and ids are refused in one line.
func TestPackByExpertErrors(t *testing.T) {
	for _, c := range []struct {
		ids                 []int
		experts, maxH, minH int
	}{{[]int{0}, 4, 48, 8}, {[]int{0}, 4, 8, 16}, {[]int{0}, 4, 64, 0}, {[]int{4}, 4, 64, 8}, {[]int{-1}, 4, 64, 8}, {nil, 0, 64, 8}} {
		if _, err := kernels.PackByExpert(c.ids, c.experts, c.maxH, c.minH, false); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}
