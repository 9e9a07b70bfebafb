#version 450
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
// Merges the split-k partials of flash_attn.comp and flash_attn_decode.comp:
// for each (query, head) row, M = max m_s, w_s = exp2(m_s - M),
// O = Σ w_s O_s / Σ w_s l_s (m in log2 units). Empty splits (m = NEG, l = 0)
// weigh nothing; a row with no live key in any split outputs 0, as the
// unsplit kernel does.
//
// One workgroup per row. The merge reads splits × D floats and is latency
// bound, so the workgroup's invocations split both ways: NC = D/4 lanes of
// vec4 columns × SL lanes of splits, each merging every SL-th split. A lane
// merges its splits online, with a running max of its own, as the attention
// kernels do their keys: it needs no global max first, so it issues the
// loads of UR splits' (m, l) and partials together, and the SL lanes' results
// meet once in shared memory: one barrier. (The pass before took the global
// max and the weights first, in subgroup and shared-memory reductions, and
// only then read the partials, with six barriers. Both take 7–9 µs per
// Llama-3 layer on the H200 whatever the split count: the pass's time is
// the barrier before it and a dispatch's fixed latency.)

layout(local_size_x = 256) in;

layout(constant_id = 0) const uint D = 128; // head dim, a multiple of 4
// Q8 also writes the output in matvec_q8's 8-bit layout (q8.glsl; D a
// multiple of 32), for the output projection of decode: one dispatch and
// one barrier fewer than rounding it in a pass of its own.
layout(constant_id = 1) const bool Q8 = false;

const uint N = 256;      // invocations
const uint NC = D / 4;   // vec4 columns of a row
const uint SL = N / NC;  // split lanes; invocations past SL × NC idle (D 80: 16 of them)
const uint UR = 16;      // splits whose loads a lane issues together
const float NEG = -1.0e30;
const float NEG_HALF = -0.5e30;

layout(push_constant) uniform Push {
    uint n_q;
    uint n_head;
    uint n_split;
} pc;

layout(std430, binding = 0) readonly buffer BP { vec4 part[]; };  // [split][n_q][n_head][D]
layout(std430, binding = 1) readonly buffer BML { vec2 ml[]; };   // [split][n_q][n_head]
layout(std430, binding = 2) writeonly buffer BO { vec4 o_out[]; }; // [n_q][n_head][D]
layout(std430, binding = 3) writeonly buffer Q8W { uint q8w[]; };
layout(std430, binding = 3) writeonly buffer Q8F { float q8f[]; };
#include "q8.glsl"

shared vec4 sums[N];     // [SL][NC]
shared vec2 lane_ml[SL]; // each split lane's (max, sum of weights)

void main() {
    const uint rows = pc.n_q * pc.n_head;
    const uint row = gl_WorkGroupID.y * pc.n_head + gl_WorkGroupID.x;
    const uint tid = gl_LocalInvocationID.x;
    const uint c = tid % NC;
    const uint sl = tid / NC;

    // This lane's splits sl, sl+SL, ..., UR at a time; past n_split a slot
    // repeats split 0 (always present) and weighs nothing.
    float m = NEG;
    float l = 0.0;
    vec4 acc = vec4(0.0);
    for (uint s0 = sl; sl < SL && s0 < pc.n_split; s0 += SL * UR) {
        vec2 e[UR];
        vec4 p[UR];
        [[unroll]] for (uint u = 0; u < UR; u++) {
            const uint s = s0 + u * SL < pc.n_split ? s0 + u * SL : 0u;
            e[u] = ml[s * rows + row];
            p[u] = part[(s * rows + row) * NC + c];
        }
        float mx = m;
        [[unroll]] for (uint u = 0; u < UR; u++) {
            if (s0 + u * SL >= pc.n_split) {
                e[u] = vec2(NEG, 0.0);
            }
            mx = max(mx, e[u].x);
        }
        // While every split so far is empty, mx is NEG; subtracting 0
        // instead keeps their weights exp2(NEG) = 0.
        const float mu = mx > NEG_HALF ? mx : 0.0;
        const float alpha = exp2(m - mu);
        l *= alpha;
        acc *= alpha;
        [[unroll]] for (uint u = 0; u < UR; u++) {
            const float w = exp2(e[u].x - mu);
            l += w * e[u].y;
            acc += w * p[u];
        }
        m = mx;
    }
    sums[tid] = acc;
    if (c == 0 && sl < SL) {
        lane_ml[sl] = vec2(m, l); // the same in every lane of the split lane
    }
    memoryBarrierShared();
    barrier();
    if (tid < NC) {
        float mx = NEG;
        [[unroll]] for (uint i = 0; i < SL; i++) {
            mx = max(mx, lane_ml[i].x);
        }
        const float mu = mx > NEG_HALF ? mx : 0.0;
        float lsum = 0.0;
        vec4 o = vec4(0.0);
        [[unroll]] for (uint i = 0; i < SL; i++) {
            const float w = exp2(lane_ml[i].x - mu);
            lsum += w * lane_ml[i].y;
            o += w * sums[i * NC + tid];
        }
        o = lsum > 0.0 ? o / lsum : vec4(0.0);
        o_out[row * NC + tid] = o;
        if (Q8) {
            sums[tid] = o; // this lane's own column, read above
        }
    }
    if (Q8) {
        memoryBarrierShared();
        barrier();
        if (tid < D / 32) {
            vec4 v[8];
            [[unroll]] for (uint j = 0; j < 8; j++) {
                v[j] = sums[8 * tid + j];
            }
            q8_store(row * (D / 32) + tid, rows * (D / 32), v);
        }
    }
}
