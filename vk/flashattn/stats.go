package flashattn

import (
	"fmt"

	"github.com/vkinfer/vkinfer/attention"
	"github.com/vkinfer/vkinfer/vk"
)

// Statistics returns the driver's compile statistics (vk.Pipeline.Statistics:
// registers per lane on NVIDIA, VGPRs and SGPRs on AMD) of the main kernel
// Record dispatches for sh, flash_attn or flash_attn_decode as the plan
// says, with the 8-bit output when q8 (as Record with IO.Q8 set). Registers
// decide how many workgroups share a compute unit, which long-context
// decode depends on. It builds the pipeline if Record has not.
func (f *FlashAttn) Statistics(sh Shape, q8 bool) ([]vk.Statistic, error) {
	p, err := f.Plan(sh)
	if err != nil {
		return nil, fmt.Errorf("flashattn: %w", err)
	}
	if q8 && !f.WritesQ8(sh) {
		return nil, fmt.Errorf("flashattn: plan %v writes no 8-bit output", p)
	}
	main, err := f.mainPipeline(p, q8)
	if err != nil {
		return nil, err
	}
	return main.Statistics()
}

// mainPipeline gets the pipeline Record dispatches first: the plan's
// kernel with flash_attn.glsl's 7 bindings, and in decode the split merge's
// 3 more.
func (f *FlashAttn) mainPipeline(p attention.Plan, q8 bool) (*vk.Pipeline, error) {
	bindings := 7
	if p.Decode() {
		bindings = 10
	}
	return f.pipeline(p.Shader(), bindings, 20, p.Wave,
		uint32(p.HeadDim), uint32(p.Lanes()), uint32(p.Wave.Subgroup), uint32(p.Br), uint32(p.Heads),
		uint32(p.Bc), uint32(p.Slots), uint32(p.Chunk), b32(p.Mask), b32(p.Splits > 1), b32(p.Stage), b32(q8), uint32(max(p.MergeHeads, 1)))
}
