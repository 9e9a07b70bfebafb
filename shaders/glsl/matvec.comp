#version 450
// matvec: dst[n][m] = sum_k W[m][k] * x[n][k] for the few (NCOLS <= 8)
// activation columns of decode, W in any dequant.glsl format.
//
// One workgroup (the lane group) owns ROWS consecutive rows. Its WG lanes
// walk each row's 16-value pieces in order, UNROLL consecutive pieces per
// lane per step, so the lanes of one step read whole superblocks as one
// contiguous span; each dequantized piece is used for all NCOLS columns.
// Partial sums are f32 and meet in wg_reduce.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_GOOGLE_include_directive : require

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;
layout(constant_id = 1) const uint QTYPE = 12;
layout(constant_id = 2) const uint NCOLS = 1;
layout(constant_id = 3) const uint ROWS = 2;
layout(constant_id = 4) const uint NSG = 8;
layout(constant_id = 5) const uint UNROLL = 1; // consecutive pieces per lane per step

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
// When UNROLL divides QPIECES a lane's pieces lie in one block and the
// pieces of a row are a whole number of steps.
const bool SAMEBLOCK = QPIECES % UNROLL == 0u;
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
    uint lastX4 = pc.K / 4u - 1u; // last vec4 of an x row
    for (uint it0 = gl_LocalInvocationID.x * UNROLL; it0 < items; it0 += WG * UNROLL) {
        // The body is branch-free so that the compiler can issue the loads
        // of all UNROLL x ROWS pieces before using any: decode is bound by
        // how many bytes each lane has in flight, not by arithmetic.
        for (uint u = 0u; u < UNROLL; u++) {
            uint it = SAMEBLOCK ? it0 + u : min(it0 + u, items - 1u);
            uint blk = (SAMEBLOCK ? it0 : it) / QPIECES, p = it % QPIECES;
            uint k0 = blk * QK;
            for (uint r = 0u; r < ROWS; r++) {
                // Rows past M are clamped rather than skipped (their sums
                // are never written), for the same reason.
                uint row = min(row0 + r, pc.M - 1u);
                vec4 v[4];
                dq_piece(row * pc.rowBytes + blk * QBYTES, p, pc.K - k0, v);
                for (uint i = 0u; i < 4u; i++) {
                    uint k4 = (k0 + dq_off(p, i)) / 4u;
                    if (QFLOAT) {
                        k4 = min(k4, lastX4); // past a partial float block v[i] is 0
                    }
                    if (!SAMEBLOCK && it0 + u >= items) {
                        v[i] = vec4(0.0); // a clamped duplicate of the last piece
                    }
                    for (uint n = 0u; n < NCOLS; n++) {
                        red_v[r * NCOLS + n] += dot(v[i], x4[n * (pc.K / 4u) + k4]);
                    }
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
