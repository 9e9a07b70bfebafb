package quant

import (
	"fmt"
	"math"
	"syscall"
	"testing"
)

func cpuNow() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Sec)*1e9 + float64(ru.Utime.Usec)*1e3
}

func TestZZCPU(t *testing.T) {
	for _, typ := range []Type{Q4_K, Q6_K, Q8_0, Q5_K, Q4_0, F32, F16, BF16} {
		w := gaussian(21, 4096)
		for i := range w {
			w[i] *= 0.02
		}
		row, _ := Quantize(typ, w)
		x := gaussian(22, 4096)
		best := math.Inf(1)
		var sink float32
		for rep := 0; rep < 7; rep++ {
			n := 20000
			t0 := cpuNow()
			for i := 0; i < n; i++ {
				sink += Dot(typ, row, x)
			}
			best = math.Min(best, (cpuNow()-t0)/float64(n))
		}
		fmt.Printf("%-5v %6.0f ns  %5.2f GB/s\n", typ, best, float64(len(row))/best)
		_ = sink
	}
}
