#version 450
// rms_norm: dst[r][c] = x[r][c] / sqrt(mean(x[r]^2) + eps) * w[c].
// One workgroup per row. dst may alias x: every invocation rewrites only the
// elements it read itself.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_GOOGLE_include_directive : require

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;
layout(constant_id = 1) const uint NSG = 8;

layout(binding = 0) writeonly buffer Dst { float dst[]; };
layout(binding = 1) readonly buffer Src { float x[]; };
layout(binding = 2) readonly buffer Wts { float w[]; };

layout(push_constant) uniform Push {
    uint rows;
    uint cols;
    float eps;
} pc;

#define RED_N 1u
#include "reduce.glsl"

void main() {
    uint row = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (row >= pc.rows) {
        return;
    }
    uint base = row * pc.cols;
    float ss = 0.0;
    for (uint c = gl_LocalInvocationID.x; c < pc.cols; c += WG) {
        float v = x[base + c];
        ss += v * v;
    }
    red_v[0] = ss;
    wg_reduce(false);
    float scale = inversesqrt(red_v[0] / float(pc.cols) + pc.eps);
    for (uint c = gl_LocalInvocationID.x; c < pc.cols; c += WG) {
        dst[base + c] = x[base + c] * scale * w[c];
    }
}
