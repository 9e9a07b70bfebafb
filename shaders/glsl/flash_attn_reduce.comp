#version 450
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
// Merges the split-k partials of flash_attn.comp (prefill; decode merges its
// own, see flash_attn_decode.comp): one workgroup per (query, head) row,
// its 256 invocations split into D/4 vec4 columns × split lanes
// (split_merge.glsl). The pass's time is mostly the barrier before it and a
// dispatch's fixed latency: 7–9 µs per Llama-3 layer on the H200 whatever
// the split count, which is why decode does without it.

layout(local_size_x = 256) in;

layout(constant_id = 0) const uint D = 128; // head dim, a multiple of 4
// Q8 also writes the output in matvec_q8's 8-bit layout (q8.glsl; D a
// multiple of 32), for the output projection: one dispatch and one barrier
// fewer than rounding it in a pass of its own.
layout(constant_id = 1) const bool Q8 = false;

const float NEG = -1.0e30;
const float NEG_HALF = -0.5e30;

layout(push_constant) uniform Push {
    uint n_q;
    uint n_head;
    uint n_split;
} pc;

layout(std430, binding = 0) readonly buffer BP { vec4 part[]; };     // [split][n_q][n_head][D]
layout(std430, binding = 1) readonly buffer BML { vec2 part_ml[]; }; // [split][n_q][n_head]
layout(std430, binding = 2) writeonly buffer BO { vec4 merged[]; };  // [n_q][n_head][D]
layout(std430, binding = 3) writeonly buffer Q8W { uint q8w[]; };
layout(std430, binding = 3) writeonly buffer Q8F { float q8f[]; };

const uint SM_D = D;
const uint SM_N = 256;
const bool SM_Q8 = Q8;
#include "split_merge.glsl"

void main() {
    const uint row = gl_WorkGroupID.y * pc.n_head + gl_WorkGroupID.x;
    merge_rows(row, 1, pc.n_q * pc.n_head, pc.n_split, gl_LocalInvocationID.x);
}
