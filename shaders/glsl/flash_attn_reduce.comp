#version 450
// Merges the split-k partials of flash_attn.comp: for each (query, head) row,
// M = max m_s, w_s = exp2(m_s - M), O = Σ w_s O_s / Σ w_s l_s (m in log2
// units). Empty splits (m = NEG, l = 0) weigh nothing; a row with no live key
// in any split outputs 0, as the unsplit kernel does.

layout(local_size_x = 64) in;

// The most splits a dispatch may have: attention.MaxSplits, passed by flashattn.
layout(constant_id = 0) const uint MAX_SPLITS = 256;
const float NEG = -1.0e30;

layout(push_constant) uniform Push {
    uint n_q;
    uint n_head;
    uint d;
    uint n_split;
} pc;

layout(std430, binding = 0) readonly buffer BP { float part[]; }; // [split][n_q][n_head][d]
layout(std430, binding = 1) readonly buffer BML { vec2 ml[]; };   // [split][n_q][n_head]
layout(std430, binding = 2) writeonly buffer BO { float o_out[]; }; // [n_q][n_head][d]

shared float weight[MAX_SPLITS];

void main() {
    const uint rows = pc.n_q * pc.n_head;
    const uint row = gl_WorkGroupID.y * pc.n_head + gl_WorkGroupID.x;
    const uint tid = gl_LocalInvocationID.x;

    float mmax = NEG;
    for (uint s = 0; s < pc.n_split; s++) {
        mmax = max(mmax, ml[s * rows + row].x);
    }
    for (uint s = tid; s < pc.n_split; s += gl_WorkGroupSize.x) {
        weight[s] = exp2(ml[s * rows + row].x - mmax);
    }
    memoryBarrierShared();
    barrier();
    float l = 0.0;
    for (uint s = 0; s < pc.n_split; s++) {
        l += weight[s] * ml[s * rows + row].y;
    }
    const float f = l > 0.0 ? 1.0 / l : 0.0;
    for (uint e = tid; e < pc.d; e += gl_WorkGroupSize.x) {
        float acc = 0.0;
        for (uint s = 0; s < pc.n_split; s++) {
            acc += weight[s] * part[(s * rows + row) * pc.d + e];
        }
        o_out[row * pc.d + e] = acc * f;
    }
}
