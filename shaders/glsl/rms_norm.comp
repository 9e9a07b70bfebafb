#version 450
// rms_norm: dst[r][c] = x[r][c] / sqrt(mean(x[r]^2) + eps) * w[c].
// One workgroup per row. dst may alias x: every invocation rewrites only the
// elements it read itself. With Q8 the rows (cols a multiple of 32) are
// also written in the 8-bit layout of the integer-dot products (q8.glsl): one
// dispatch and one barrier fewer than rounding them in a pass of their own.
// With ADD, dst[r][c] = res[r][c] + that (RMSNormAdd: Gemma 3's post-norms
// and the residual add after them, one dispatch and one barrier instead of
// two of each). dst may alias res as it may x: each value of res is read
// by the invocation that then writes it.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_GOOGLE_include_directive : require

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;
layout(constant_id = 1) const uint NSG = 8;
layout(constant_id = 2) const bool Q8 = false;
// BLOCKS (with Q8): the workgroup has a lane per block of 32 values, which
// loads its block and weights at once and keeps them in registers, so a row
// costs one round of loads and one reduction. The general path reads the
// row once for the sum of squares and again to scale it: on decode's one
// row of 4096 that second round trip came after the reduction.
layout(constant_id = 3) const bool BLOCKS = false;
// ADD: add the residual res (binding 4); the Go side does not combine it
// with Q8 (the sum is a residual stream, which feeds norms, not products).
layout(constant_id = 4) const bool ADD = false;

layout(binding = 0) writeonly buffer Dst { float dst[]; };
layout(binding = 1) readonly buffer Src { float x[]; };
layout(binding = 2) readonly buffer Wts { float w[]; };
layout(binding = 0) writeonly buffer Dst4 { vec4 dst4[]; };
layout(binding = 1) readonly buffer Src4 { vec4 x4[]; };
layout(binding = 2) readonly buffer Wts4 { vec4 w4[]; };
layout(binding = 3) writeonly buffer Q8W { uint q8w[]; };
layout(binding = 3) writeonly buffer Q8F { float q8f[]; };
layout(binding = 4) readonly buffer Res { float res[]; };

layout(push_constant) uniform Push {
    uint rows;
    uint cols;
    float eps;
} pc;

#define RED_N 1u
#include "reduce.glsl"
#include "q8.glsl"

void main() {
    uint row = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (row >= pc.rows) {
        return;
    }
    uint base = row * pc.cols;
    if (Q8 && BLOCKS) {
        // The workgroup is a whole number of subgroups (lavapipe's
        // reductions lost a partial one); lanes past the row's blocks add 0.
        uint nb = pc.cols / 32u, b = gl_LocalInvocationID.x;
        uint i0 = base / 4u + 8u * b;
        vec4 v[8], wv[8];
        float bs = 0.0;
        if (b < nb) {
            for (uint j = 0u; j < 8u; j++) {
                v[j] = x4[i0 + j];
                wv[j] = w4[8u * b + j];
                bs += dot(v[j], v[j]);
            }
        }
        red_v[0] = bs;
        wg_reduce(false);
        float bscale = inversesqrt(red_v[0] / float(pc.cols) + pc.eps);
        if (b < nb) {
            for (uint j = 0u; j < 8u; j++) {
                v[j] *= bscale * wv[j];
                dst4[i0 + j] = v[j];
            }
            q8_store(row * nb + b, pc.rows * nb, v);
        }
        return;
    }
    float ss = 0.0;
    for (uint c = gl_LocalInvocationID.x; c < pc.cols; c += WG) {
        float v = x[base + c];
        ss += v * v;
    }
    red_v[0] = ss;
    wg_reduce(false);
    float scale = inversesqrt(red_v[0] / float(pc.cols) + pc.eps);
    if (Q8) {
        // A lane per block of 32 values, which it rounds as a whole.
        uint nb = pc.cols / 32u, blocks = pc.rows * nb;
        for (uint b = gl_LocalInvocationID.x; b < nb; b += WG) {
            vec4 v[8];
            for (uint j = 0u; j < 8u; j++) {
                uint i4 = (base / 4u) + 8u * b + j;
                v[j] = x4[i4] * scale * w4[8u * b + j];
                dst4[i4] = v[j];
            }
            q8_store(row * nb + b, blocks, v);
        }
        return;
    }
    for (uint c = gl_LocalInvocationID.x; c < pc.cols; c += WG) {
        float v = x[base + c] * scale * w[c];
        if (ADD) {
            v += res[base + c];
        }
        dst[base + c] = v;
    }
}
