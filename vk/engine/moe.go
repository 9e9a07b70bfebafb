package engine

import (
	"errors"

	"github.com/vkinfer/vkinfer/backend"
)

// errMoE is what recording a mixture-of-experts model on the Vulkan engine
// gives until its kernels land (issue 19).
var errMoE = errors.New("mixture-of-experts ops (route, mul_mat_id, moe_sum) are not on the Vulkan engine yet: run with --backend cpu")

func (p *program) Route(ids, weights, logits backend.Tensor, k int, norm bool) { p.fail(errMoE) }
func (p *program) MatMulID(dst, w, x, ids backend.Tensor)                      { p.fail(errMoE) }
func (p *program) MoESum(dst, y, weights, r backend.Tensor)                    { p.fail(errMoE) }
func (o *planOps) Route(ids, weights, logits backend.Tensor, k int, norm bool) { o.fail(errMoE) }
func (o *planOps) MatMulID(dst, w, x, ids backend.Tensor)                      { o.fail(errMoE) }
func (o *planOps) MoESum(dst, y, weights, r backend.Tensor)                    { o.fail(errMoE) }
