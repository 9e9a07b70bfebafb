#version 450
// quantize_q8: rounds f32 activations to the q8 layout of matvec_q8
// (q8.glsl), optionally computing them first: with OP_SWIGLU the values are
// silu(x) * y, with OP_GEGLU gelu(x) * y (glu.glsl), also written as f32 to
// out (decode's gated FFN activation fused with its rounding: one dispatch
// and one barrier instead of two). x is NCOLS
// rows of K values, K a multiple of 32, which makes the rows one run of
// blocks. One invocation per block of 32 values.
#extension GL_GOOGLE_include_directive : require

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;
layout(constant_id = 1) const uint OP = 0;

const uint OP_COPY = 0u;   // x
const uint OP_SWIGLU = 1u; // silu(x) * y
const uint OP_GEGLU = 2u;  // gelu(x) * y

layout(binding = 0) writeonly buffer Q8W { uint q8w[]; };
layout(binding = 0) writeonly buffer Q8F { float q8f[]; };
layout(binding = 1) readonly buffer X { vec4 x4[]; };
layout(binding = 2) readonly buffer Y { vec4 y4[]; };
layout(binding = 3) writeonly buffer Out { vec4 out4[]; };

layout(push_constant) uniform Push {
    uint blocks; // NCOLS * K / 32
} pc;

#include "q8.glsl"
#include "glu.glsl"

void main() {
    uint i = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * WG + gl_LocalInvocationID.x;
    if (i >= pc.blocks) {
        return;
    }
    vec4 v[8];
    for (uint j = 0u; j < 8u; j++) {
        vec4 a = x4[8u * i + j];
        if (OP != OP_COPY) {
            a = glu_act(OP == OP_GEGLU ? GLU_GELU : GLU_SILU, a) * y4[8u * i + j];
            out4[8u * i + j] = a;
        }
        v[j] = a;
    }
    q8_store(i, pc.blocks, v);
}
