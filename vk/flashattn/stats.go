package flashattn

import (
	"fmt"

	"github.com/vkinfer/vkinfer/attention"
	"github.com/vkinfer/vkinfer/vk"
)

// Statistics returns the driver's compile statistics (vk.Pipeline.Statistics:
// registers per lane on NVIDIA, VGPRs and SGPRs on AMD) of the main kernel
// Record dispatches for sh: the cooperative-matrix kernel where it runs,
// else flash_attn or flash_attn_decode as the plan says, with the 8-bit
// output when q8 (as Record with IO.Q8 set). Registers decide how many
// workgroups share a compute unit, which long-context decode depends on.
// It builds the pipeline if Record has not.
func (f *FlashAttn) Statistics(sh Shape, q8 bool) ([]vk.Statistic, error) {
	if cp, ok := f.coopRuns(sh, q8); ok {
		pipe, err := f.pipeline(coopSpec(cp))
		if err != nil {
			return nil, err
		}
		return pipe.Statistics()
	}
	p, err := f.Plan(sh)
	if err != nil {
		return nil, fmt.Errorf("flashattn: %w", err)
	}
	if q8 && !f.WritesQ8(sh) {
		return nil, fmt.Errorf("flashattn: plan %v writes no 8-bit output", p)
	}
	main, err := f.mainPipeline(p, q8, sh.Rows)
	if err != nil {
		return nil, err
	}
	return main.Statistics()
}

// mainPipeline gets the pipeline Record dispatches first.
func (f *FlashAttn) mainPipeline(p attention.Plan, q8, rows bool) (*vk.Pipeline, error) {
	return f.pipeline(mainSpec(p, q8, rows))
}
