#version 450
// matvec: dst[n][m] = sum_k W[m][k] * x[n][k] for the few (NCOLS <= 8)
// activation columns of decode, W in any dequant.glsl format.
//
// One workgroup (the lane group) owns ROWS consecutive rows. Its WG lanes
// walk each row's 16-value pieces in order, so the lanes of one step read
// whole superblocks as one contiguous span; each dequantized piece is used
// for all NCOLS columns. Partial sums are f32 and meet in wg_reduce.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_GOOGLE_include_directive : require

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;
layout(constant_id = 1) const uint QTYPE = 12;
layout(constant_id = 2) const uint NCOLS = 1;
layout(constant_id = 3) const uint ROWS = 2;
layout(constant_id = 4) const uint NSG = 8;

layout(binding = 0) writeonly buffer Dst { float dst[]; };
layout(binding = 1) readonly buffer Wts { uint W[]; };
layout(binding = 2) readonly buffer X { vec4 x4[]; };

layout(push_constant) uniform Push {
    uint M;        // rows of W
    uint K;        // values per row
    uint rowBytes; // bytes per row of W
    uint groups;   // workgroups doing work: ceil(M / ROWS)
} pc;

#include "dequant.glsl"
#define RED_N (ROWS * NCOLS)
#include "reduce.glsl"

void main() {
    // The grid may be folded into 2D to stay under the 65535 limit per dimension.
    uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (group >= pc.groups) {
        return; // whole workgroup: barriers below stay uniform
    }
    uint row0 = group * ROWS;
    uint items = (pc.K + QK - 1u) / QK * QPIECES;

    for (uint i = 0u; i < RED_N; i++) {
        red_v[i] = 0.0;
    }
    for (uint it = gl_LocalInvocationID.x; it < items; it += WG) {
        uint blk = it / QPIECES, p = it % QPIECES;
        uint k0 = blk * QK;
        for (uint r = 0u; r < ROWS; r++) {
            if (row0 + r >= pc.M) {
                break;
            }
            vec4 v[4];
            dq_piece((row0 + r) * pc.rowBytes + blk * QBYTES, p, pc.K - k0, v);
            for (uint i = 0u; i < 4u; i++) {
                uint k = k0 + dq_off(p, i);
                if (QFLOAT && k >= pc.K) {
                    break; // past the end of a partial float block
                }
                for (uint n = 0u; n < NCOLS; n++) {
                    red_v[r * NCOLS + n] += dot(v[i], x4[(n * pc.K + k) >> 2]);
                }
            }
        }
    }

    wg_reduce(false);
    if (gl_LocalInvocationID.x == 0u) {
        for (uint r = 0u; r < ROWS; r++) {
            if (row0 + r < pc.M) {
                for (uint n = 0u; n < NCOLS; n++) {
                    dst[n * pc.M + row0 + r] = red_v[r * NCOLS + n];
                }
            }
        }
    }
}
