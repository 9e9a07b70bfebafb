// route.glsl: a mixture of experts' top-k over one token's router logits,
// run by one subgroup: p = softmax(logits[row]) over E experts; ids[row]
// gets the k experts of highest p in descending order (ties to the lower
// index) as exact f32 integers, weights[row] their probabilities, divided by
// their sum (clamped below at 6.103515625e-5, llama.cpp's guard) when NORM.
// Included by route.comp (a dispatch of its own) and router.comp (the
// router product's last workgroup).
//
// Its cost is its chain of reductions. Lane l of the subgroup holds the
// probabilities of experts l, l+S, … (S the subgroup's size) in registers,
// so each reduction (the max, the sum, each of the k rounds' best
// (p, index) pair) is a subgroup operation and none waits on a workgroup
// barrier: with the experts spread over a workgroup's subgroups instead,
// eight of them at Qwen3-30B-A3B's 128 experts, every round paid one, and
// the router's tg128 was 1 % slower (docs/KERNELS.md). A round marks its
// expert taken (p = -1, below every probability) in the register of the
// lane that holds it.
//
// The includer declares WG (its workgroup size), MAXE (experts, at most),
// SGMIN (the narrowest subgroup the device runs) and NORM, the buffers
// logits[], ids[] and weights[], and pc.E and pc.k. A subgroup wider than
// the workgroup has WG invocations.

const uint SGL = SGMIN < WG ? SGMIN : WG;     // the fewest invocations a subgroup has
const uint PER = (MAXE + SGL - 1u) / SGL;     // experts a lane holds, at most

shared float chosen[MAXE]; // lane 0's alone

// better says whether (va, ia) ranks above (vb, ib).
bool better(float va, uint ia, float vb, uint ib) { return va > vb || (va == vb && ia < ib); }

// route_row routes token row; the invocations of one subgroup call it, and
// only they.
void route_row(uint row) {
    uint lane = gl_SubgroupInvocationID, S = min(gl_SubgroupSize, WG);
    uint base = row * pc.E;

    float p[PER];
    float m = uintBitsToFloat(0xFF800000u); // -inf
    [[unroll]] for (uint j = 0u; j < PER; j++) {
        uint e = lane + j * S;
        p[j] = e < pc.E ? logits[base + e] : m;
        m = max(m, p[j]);
    }
    m = subgroupMax(m);
    float sum = 0.0;
    [[unroll]] for (uint j = 0u; j < PER; j++) {
        uint e = lane + j * S;
        p[j] = e < pc.E ? exp(p[j] - m) : 0.0;
        sum += p[j];
    }
    float inv = 1.0 / subgroupAdd(sum);
    [[unroll]] for (uint j = 0u; j < PER; j++) {
        // Past E: below a taken expert's -1, so never chosen.
        p[j] = lane + j * S < pc.E ? p[j] * inv : -2.0;
    }
    for (uint r = 0u; r < pc.k; r++) {
        float bv = -3.0;
        uint bi = 0xFFFFFFFFu;
        [[unroll]] for (uint j = 0u; j < PER; j++) {
            if (better(p[j], lane + j * S, bv, bi)) {
                bv = p[j];
                bi = lane + j * S;
            }
        }
        float mv = subgroupMax(bv);
        uint mi = subgroupMin(bv == mv ? bi : 0xFFFFFFFFu);
        [[unroll]] for (uint j = 0u; j < PER; j++) {
            if (lane + j * S == mi) {
                p[j] = -1.0;
            }
        }
        if (lane == 0u) {
            chosen[r] = mv;
            ids[row * pc.k + r] = float(mi);
        }
    }
    if (lane == 0u) {
        float s = 0.0;
        for (uint r = 0u; r < pc.k; r++) {
            s += chosen[r];
        }
        float d = NORM ? max(s, 6.103515625e-5) : 1.0;
        for (uint r = 0u; r < pc.k; r++) {
            weights[row * pc.k + r] = NORM ? chosen[r] / d : chosen[r];
        }
    }
}
