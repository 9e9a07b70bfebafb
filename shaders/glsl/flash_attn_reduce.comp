#version 450
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
// Merges the split-k partials of flash_attn.comp and flash_attn_decode.comp:
// for each (query, head) row,
// M = max m_s, w_s = exp2(m_s - M), O = Σ w_s O_s / Σ w_s l_s (m in log2
// units). Empty splits (m = NEG, l = 0) weigh nothing; a row with no live key
// in any split outputs 0, as the unsplit kernel does.
//
// One workgroup per row. The merge reads splits × D floats and is latency
// bound when one thread walks all splits, so the workgroup's invocations
// split both ways: NC = D/4 lanes of vec4 columns × SL lanes of splits, each
// summing every SL-th split, then the SL partial sums meet in shared memory.
// Max and sum over the (m, l) pairs reduce in subgroups, then across them
// in shared memory (reduce.glsl, whatever the subgroup size): a tree in
// shared memory took eight barriers per reduction.

layout(local_size_x = 256) in;

// The most splits a dispatch may have: attention.MaxSplits, passed by flashattn.
layout(constant_id = 0) const uint MAX_SPLITS = 256;
layout(constant_id = 1) const uint D = 128; // head dim, a multiple of 4
// Q8 also writes the output in matvec_q8's 8-bit layout (q8.glsl; D a
// multiple of 32), for the output projection of decode: one dispatch and
// one barrier fewer than rounding it in a pass of its own.
layout(constant_id = 2) const bool Q8 = false;
layout(constant_id = 3) const uint NSG = 32; // the most subgroups 256 invocations make (reduce.glsl)

const uint N = 256;      // invocations
const uint NC = D / 4;   // vec4 columns of a row
const uint SL = N / NC;  // split lanes
const float NEG = -1.0e30;

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

shared float weight[MAX_SPLITS];
shared vec4 sums[SL * NC];

#define RED_N 1u
#include "reduce.glsl"

void main() {
    const uint rows = pc.n_q * pc.n_head;
    const uint row = gl_WorkGroupID.y * pc.n_head + gl_WorkGroupID.x;
    const uint tid = gl_LocalInvocationID.x;

    // (m, l) of the splits this invocation owns (n_split <= MAX_SPLITS).
    float m = NEG;
    float l = 0.0;
    for (uint s = tid; s < pc.n_split; s += N) {
        const vec2 e = ml[s * rows + row];
        m = max(m, e.x);
    }
    red_v[0] = m;
    wg_reduce(true);
    const float mmax = red_v[0];
    for (uint s = tid; s < pc.n_split; s += N) {
        const vec2 e = ml[s * rows + row];
        const float w = exp2(e.x - mmax);
        weight[s] = w;
        l += w * e.y;
    }
    red_v[0] = l;
    wg_reduce(false);
    const float lsum = red_v[0];
    memoryBarrierShared();
    barrier(); // weight[] written

    const uint c = tid % NC;
    const uint sl = tid / NC;
    vec4 acc = vec4(0.0);
    if (sl < SL) {
        // UR splits per step, their loads issued together: a loop that
        // used each load at once waited one memory latency per split.
        const uint UR = 4;
        for (uint s0 = sl; s0 < pc.n_split; s0 += SL * UR) {
            vec4 p[UR];
            [[unroll]] for (uint u = 0; u < UR; u++) {
                const uint s = min(s0 + u * SL, pc.n_split - 1);
                p[u] = part[(s * rows + row) * NC + c];
            }
            [[unroll]] for (uint u = 0; u < UR; u++) {
                if (s0 + u * SL < pc.n_split) {
                    acc += weight[s0 + u * SL] * p[u];
                }
            }
        }
        sums[sl * NC + c] = acc;
    }
    memoryBarrierShared();
    barrier();
    if (tid < NC) {
        vec4 o = vec4(0.0);
        for (uint i = 0; i < SL; i++) {
            o += sums[i * NC + tid];
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
