// Package moeref is the float64 reference of a mixture-of-experts router,
// shared by the tests of every backend that implements backend.Ops.Route.
package moeref

import (
	"math"
	"slices"
)

// SumMin is the least sum the chosen weights are divided by when they are
// renormalised: llama.cpp clamps it at 6.103515625e-5 (2^-14), the
// smallest normal f16.
const SumMin = 6.103515625e-5

// Route is the router in float64: the k most probable experts of
// softmax(x), ties to the lower index, and their probabilities,
// renormalised to sum to 1 (the sum clamped at SumMin) when norm.
func Route(x []float32, k int, norm bool) (ids []int, w []float64) {
	mx := math.Inf(-1)
	for _, v := range x {
		mx = max(mx, float64(v))
	}
	p := make([]float64, len(x))
	var sum float64
	for e, v := range x {
		p[e] = math.Exp(float64(v) - mx)
		sum += p[e]
	}
	order := make([]int, len(x))
	for e := range order {
		order[e] = e
		p[e] /= sum
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case p[a] > p[b]:
			return -1
		case p[a] < p[b]:
			return 1
		}
		return 0
	})
	ids = order[:k]
	var s float64
	for _, e := range ids {
		w = append(w, p[e])
		s += p[e]
	}
	if norm {
		for j := range w {
			w[j] /= max(s, SumMin)
		}
	}
	return ids, w
}
