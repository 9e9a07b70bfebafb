#version 450
// quantize_f16: rounds rows of f32 activations to f16 for the
// cooperative-matrix products (matmul_coopmat.glsl): dst holds rows x cols
// f16 values, then one f32 scale per row, s = 2^e with the least e >= 0
// that brings the row's largest magnitude within LIMIT. A row holds
// x / s, so activations beyond f16's range (65504) stay finite, and a power
// of two changes no significand: rows within range are rounded exactly as
// a plain conversion would round them. One workgroup per row.
//
// With blocked > 0 (matvec_coopmat's layout) the values go in blocks of 16
// along K instead: value k of row r at ((k/16)*blocked + r)*16 + k%16, so
// that a 16x16 fragment of 16 rows is 512 contiguous bytes, four cache
// lines, where a fragment of whole rows touches sixteen; blocked (at
// least rows) is the rows the layout holds, and the scales follow its
// blocked*cols values.
//
// OP computes the values first, and writes them as f32 to out as well:
// the gated FFN activation act(x) * y (glu.glsl), or the RMS norm of x
// with weights y. The kernel that writes an activation the
// cooperative-matrix products read then writes their copy too: one
// dispatch and one barrier fewer than a rounding pass of its own.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_GOOGLE_include_directive : require

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;
layout(constant_id = 1) const uint NSG = 8;
layout(constant_id = 2) const uint OP = 0;

const uint OP_COPY = 0u;   // x
const uint OP_SWIGLU = 1u; // silu(x) * y
const uint OP_GEGLU = 2u;  // gelu(x) * y
const uint OP_NORM = 3u;   // x / sqrt(mean(x^2) + eps) * y, y one row

layout(binding = 0) writeonly buffer DstH { uint dsth[]; };
layout(binding = 0) writeonly buffer DstS { float dsts[]; };
layout(binding = 1) readonly buffer Src4 { vec4 x4[]; };
layout(binding = 2) readonly buffer Y4 { vec4 y4[]; };
layout(binding = 3) writeonly buffer Out4 { vec4 out4[]; };

layout(push_constant) uniform Push {
    uint rows;
    uint cols;    // a multiple of 4 (of 16 when blocked)
    uint blocked; // 0: row after row; else the rows of the blocked layout
    float eps;    // OP_NORM
} pc;

// at is the place, in halves, of value k of row r.
uint at(uint r, uint k) {
    return pc.blocked == 0u ? r * pc.cols + k : ((k >> 4) * pc.blocked + r) * 16u + (k & 15u);
}

#define RED_N 1u
#include "reduce.glsl"
#include "glu.glsl"

// LIMIT leaves f16 headroom below 65504 for the rounding of x / s.
const float LIMIT = 32768.0;

// value is vec4 c of the row at base (in vec4s): OP of its inputs; norm is
// the norm's 1 / sqrt(mean + eps).
vec4 value(uint base, uint c, float norm) {
    vec4 v = x4[base + c];
    if (OP == OP_SWIGLU || OP == OP_GEGLU) {
        v = glu_act(OP == OP_GEGLU ? GLU_GELU : GLU_SILU, v) * y4[base + c];
    } else if (OP == OP_NORM) {
        v = v * norm * y4[c];
    }
    return v;
}

void main() {
    uint row = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (row >= pc.rows) {
        return;
    }
    uint base = row * pc.cols / 4u;
    float norm = 1.0;
    if (OP == OP_NORM) {
        float ss = 0.0;
        for (uint c = gl_LocalInvocationID.x; c < pc.cols / 4u; c += WG) {
            vec4 v = x4[base + c];
            ss += dot(v, v);
        }
        red_v[0] = ss;
        wg_reduce(false);
        norm = inversesqrt(red_v[0] / float(pc.cols) + pc.eps);
    }
    float mx = 0.0;
    for (uint c = gl_LocalInvocationID.x; c < pc.cols / 4u; c += WG) {
        vec4 v = abs(value(base, c, norm));
        mx = max(mx, max(max(v.x, v.y), max(v.z, v.w)));
    }
    red_v[0] = mx;
    wg_reduce(true);
    mx = red_v[0];
    // The exponent of mx / LIMIT, rounded up: frexp gives m in [0.5, 1).
    int e = 0;
    if (mx > LIMIT) {
        frexp(mx / LIMIT, e);
        e = clamp(e, 0, 126);
    }
    float inv = exp2(float(-e));
    // The values again rather than kept: out may be x (a norm in place),
    // and each invocation writes only what it has just read.
    for (uint c = gl_LocalInvocationID.x; c < pc.cols / 4u; c += WG) {
        vec4 v = value(base, c, norm);
        if (OP != OP_COPY) {
            out4[base + c] = v;
        }
        v *= inv;
        uint h = at(row, 4u * c) / 2u; // 4 values never straddle a block
        dsth[h] = packHalf2x16(v.xy);
        dsth[h + 1u] = packHalf2x16(v.zw);
    }
    if (gl_LocalInvocationID.x == 0u) {
        uint n = pc.blocked == 0u ? pc.rows : pc.blocked;
        dsts[n * pc.cols / 2u + row] = exp2(float(e));
    }
}
