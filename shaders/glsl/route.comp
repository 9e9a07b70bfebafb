#version 450
// route: a mixture of experts' router, one workgroup per token: p =
// softmax(logits[row]) over E experts; ids[row] gets the k experts of
// highest p in descending order (ties to the lower index) as exact f32
// integers, weights[row] their probabilities, divided by their sum
// (clamped below at 6.103515625e-5, llama.cpp's guard) when NORM. It runs
// on the device so that matvec_id reads the ids where they are: no round
// trip through the host inside a token.
//
// The reductions (max, sum, each round's best expert) are trees over the
// WG lanes in shared memory (WG a power of two), so every barrier is in
// uniform control flow and nothing depends on the subgroup size. A round
// picks the best remaining (p, index) pair and marks it taken with p = -1,
// below every probability.

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;
layout(constant_id = 1) const uint MAXE = 1024; // most experts (shared capacity)
layout(constant_id = 2) const bool NORM = true;

layout(binding = 0) readonly buffer Logits { float logits[]; };
layout(binding = 1) writeonly buffer Ids { float ids[]; };
layout(binding = 2) writeonly buffer Weights { float weights[]; };

layout(push_constant) uniform Push {
    uint rows; // tokens
    uint E;    // experts, <= MAXE
    uint k;    // experts chosen per token, <= E
} pc;

shared float p[MAXE];
shared float chosen[MAXE];
shared float rv[WG];
shared uint ri[WG];

// better says whether (va, ia) ranks above (vb, ib).
bool better(float va, uint ia, float vb, uint ib) { return va > vb || (va == vb && ia < ib); }

void main() {
    uint row = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (row >= pc.rows) {
        return; // whole workgroup: barriers below stay uniform
    }
    uint lane = gl_LocalInvocationID.x;
    uint base = row * pc.E;

    float m = uintBitsToFloat(0xFF800000u); // -inf
    for (uint e = lane; e < pc.E; e += WG) {
        m = max(m, logits[base + e]);
    }
    rv[lane] = m;
    barrier();
    for (uint s = WG / 2u; s > 0u; s >>= 1u) {
        if (lane < s) {
            rv[lane] = max(rv[lane], rv[lane + s]);
        }
        barrier();
    }
    m = rv[0];
    barrier(); // rv[0] read by every lane before it is reused

    float sum = 0.0;
    for (uint e = lane; e < pc.E; e += WG) {
        float v = exp(logits[base + e] - m);
        p[e] = v;
        sum += v;
    }
    rv[lane] = sum;
    barrier();
    for (uint s = WG / 2u; s > 0u; s >>= 1u) {
        if (lane < s) {
            rv[lane] += rv[lane + s];
        }
        barrier();
    }
    float inv = 1.0 / rv[0];
    for (uint e = lane; e < pc.E; e += WG) {
        p[e] *= inv; // each lane scales the experts it wrote
    }
    barrier(); // p complete; rv[0] read by every lane

    for (uint j = 0u; j < pc.k; j++) {
        float bv = -2.0; // below a taken expert's -1
        uint bi = 0xFFFFFFFFu;
        for (uint e = lane; e < pc.E; e += WG) {
            if (p[e] > bv) { // ascending e: ties keep the lower index
                bv = p[e];
                bi = e;
            }
        }
        rv[lane] = bv;
        ri[lane] = bi;
        barrier();
        for (uint s = WG / 2u; s > 0u; s >>= 1u) {
            if (lane < s && better(rv[lane + s], ri[lane + s], rv[lane], ri[lane])) {
                rv[lane] = rv[lane + s];
                ri[lane] = ri[lane + s];
            }
            barrier();
        }
        if (lane == 0u) {
            uint e = ri[0];
            chosen[j] = rv[0];
            ids[row * pc.k + j] = float(e);
            p[e] = -1.0;
        }
        barrier(); // the taken mark and rv/ri reuse
    }

    if (lane == 0u) {
        float s = 0.0;
        for (uint j = 0u; j < pc.k; j++) {
            s += chosen[j];
        }
        float d = NORM ? max(s, 6.103515625e-5) : 1.0;
        for (uint j = 0u; j < pc.k; j++) {
            weights[row * pc.k + j] = NORM ? chosen[j] / d : chosen[j];
        }
    }
}
