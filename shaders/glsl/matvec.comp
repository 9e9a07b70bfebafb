#version 450
// matvec: dst[n][m] = sum_k W[m][k] * x[n][k] for the few (NCOLS <= 8)
// activation columns of decode, W in any dequant.glsl format.
//
// Decode reads every weight once, so this kernel must keep the memory busy
// while spending few instructions per weight. A design that dequantized
// 16-value pieces, re-reading activations per row and scales per piece,
// reached a quarter of the copy bandwidth on an H200; this one reaches about
// a third (docs/KERNELS.md, which also says what is still unexplained). Here:
//   - A row is cut into slices of 32 values. Lane l of the workgroup (WG
//     lanes) takes UNROLL consecutive slices per step, the same slices of
//     each of the workgroup's ROWS rows: it loads their activations into
//     registers once and reuses them for all ROWS rows.
//   - A slice is decoded as NG groups of values with one affine map each,
//     so scales, mins and offsets are applied once per group (A * sum f*x
//     + C * sum x, see dq_slice) rather than once per weight; sum x is
//     computed with the activations. Quants become floats with two integer
//     instructions each (see NB).
//   - Q4_K and Q5_K slices are whole 16-byte words (block sizes are
//     multiples of 16), read through the W4 view of the weights.
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
layout(constant_id = 5) const uint UNROLL = 1; // consecutive slices per lane per step
// RESID adds r to the result as it is written (a residual connection: one
// dispatch and one barrier fewer than a separate add). dst may be r: each
// value is read just before the same invocation overwrites it.
layout(constant_id = 6) const bool RESID = false;

layout(binding = 0) writeonly buffer Dst { float dst[]; };
layout(binding = 1) readonly buffer Wts { uint W[]; };
// The same bytes as 16-byte words (the Go side checks the binding offset is
// a multiple of 16).
layout(binding = 1) readonly buffer Wts4 { uvec4 W4[]; };
layout(binding = 2) readonly buffer X { vec4 x4[]; };
layout(binding = 3) readonly buffer R { float res[]; };

layout(push_constant) uniform Push {
    uint M;        // rows of W
    uint K;        // values per row
    uint rowBytes; // bytes per row of W
    uint groups;   // workgroups doing work: ceil(M / ROWS)
} pc;

#include "dequant.glsl"

// A slice is 32 values: SPB slices per quant block. Float rows have no
// blocks; their slices are simply consecutive and the last may be partial.
const uint SPB = QKQUANT ? 8u : 1u;
// NG groups of GV vec4s per slice, one affine map each.
const uint NG = QTYPE == T_Q6_K ? 4u : ((QKQUANT || QTYPE == T_Q4_0) ? 2u : 1u);
const uint GV = 8u / NG;
const uint ESIZE = QTYPE == T_F32 ? 4u : 2u; // bytes per value of float rows
// Quants of NB bits are decoded as the floats 1 + q / 2^NB: q goes straight
// into the top of the mantissa of 1.0 with one shift and one and-or, where
// a conversion would cost a quarter-rate instruction (NVIDIA) or a subtract
// more. The map of each group absorbs the offset: sum q*x = 2^NB * (sum f*x
// - sum x). The leading 1 costs each product f*x NB of its 24 significant
// bits of q*x, still far finer than the quantization; for Q8_0 only 16
// would be left, so Q8_0 (like the float types) converts exactly instead
// (MANT false).
const bool MANT = !QFLOAT && QTYPE != T_Q8_0;
const uint NB = QTYPE == T_Q6_K ? 6u : (QTYPE == T_Q5_K ? 5u : 4u);

// mant4 returns the 4 floats 1 + q/2^NB for the NB-bit fields at bits
// lo, lo+8, lo+16 and lo+24 of w (one per byte; higher bits are ignored).
vec4 mant4(uint w, uint lo) {
    const uint top = 23u - NB; // the field's place in the mantissa
    const uint mask = ((1u << NB) - 1u) << top;
    uvec4 f;
    for (uint k = 0u; k < 4u; k++) {
        uint at = lo + 8u * k;
        f[k] = ((at <= top ? w << (top - at) : w >> (at - top)) & mask) | 0x3F800000u;
    }
    return uintBitsToFloat(f);
}

// bytes2 returns bytes 0 and 1 of v as floats.
vec2 bytes2(uint v) {
    return uintBitsToFloat(uvec2(v & 0xFFu, (v >> 8) & 0xFFu) | 0x4B000000u) - 8388608.0;
}

// slice_val returns the offset within its block (floats: within the slice)
// of the first value of group g of slice s; the group's values follow it.
uint slice_val(uint s, uint g) {
    if (QTYPE == T_Q4_K || QTYPE == T_Q5_K) {
        // Byte l of 16-byte word s of qs: low nibble is value
        // 64(s/2) + 16(s%2) + l, high nibble that plus 32.
        return 64u * (s >> 1) + 16u * (s & 1u) + 32u * g;
    }
    if (QTYPE == T_Q6_K) {
        // Bytes 8(s%4).. of the ql/qh halves of half s/4 give values
        // 128(s/4) + 32g + 8(s%4).. for the four 2-bit planes g.
        return 128u * (s >> 2) + 32u * g + 8u * (s & 3u);
    }
    return 16u * g; // Q4_0 nibble halves; one group for the rest
}

// dq_slice decodes slice s of the block at byte offset b (floats: the slice
// itself starts at b) into q[8] and the maps A, C of its groups: with f
// the values of group g (q[g*GV ..], GV vec4s) and x the activations they
// meet, the group's dot product is A[g] * sum f*x + C[g] * sum x. For
// quants f = 1 + q/2^NB (see NB); for Q8_0 f = q, for floats f is the
// weight (A = 1, C = 0).
// lim is the number of the row's values from the slice's first on; only
// float slices can be partial, and their values past it are 0.
void dq_slice(uint b, uint s, uint lim, out vec4 q[8], out float A[4], out float C[4]) {
    // a, c: the group's weights are a * q + c.
    float a[4] = float[4](1.0, 1.0, 1.0, 1.0), c[4] = float[4](0.0, 0.0, 0.0, 0.0);
    if (QTYPE == T_Q4_K || QTYPE == T_Q5_K) {
        uvec4 hd = W4[b >> 4]; // d, dmin; scales[12] in hd.yzw
        vec2 dm = unpackHalf2x16(hd.x);
        // The 6-bit scales and mins of sub-blocks 2j and 2j+1, two bytes
        // of a word at a time (ggml's get_scale_min_k4 for a pair).
        uint j = s >> 1, sh = 16u * (j & 1u);
        uint sc = (hd.y >> sh) & 0x3F3Fu, mn = (hd.z >> sh) & 0x3F3Fu;
        if (j >= 2u) {
            uint e = hd.w >> sh;
            sc = (e & 0x0F0Fu) | ((hd.y >> (sh + 2u)) & 0x3030u);
            mn = ((e >> 4) & 0x0F0Fu) | ((hd.z >> (sh + 2u)) & 0x3030u);
        }
        vec2 scf = dm.x * bytes2(sc), mnf = -dm.y * bytes2(mn);
        a[0] = scf.x;
        a[1] = scf.y;
        c[0] = mnf.x;
        c[1] = mnf.y;
        // Q4_K: qs at byte 16. Q5_K: qh[32] at 16 (bit 2j of byte l is the
        // fifth bit of the low nibble, bit 2j+1 of the high), qs at 48.
        uvec4 qs = W4[(b >> 4) + (QTYPE == T_Q4_K ? 1u : 3u) + s];
        if (QTYPE == T_Q4_K) {
            for (uint i = 0u; i < 4u; i++) {
                q[i] = mant4(qs[i], 0u);
                q[4u + i] = mant4(qs[i], 4u);
            }
        } else {
            uvec4 qh = W4[(b >> 4) + 1u + (s & 1u)];
            uvec4 lo = (qs & 0x0F0F0F0Fu) | (((qh >> (2u * j)) & 0x01010101u) << 4);
            uvec4 hi = ((qs >> 4) & 0x0F0F0F0Fu) | (((qh >> (2u * j + 1u)) & 0x01010101u) << 4);
            for (uint i = 0u; i < 4u; i++) {
                q[i] = mant4(lo[i], 0u);
                q[4u + i] = mant4(hi[i], 0u);
            }
        }
    } else if (QTYPE == T_Q6_K) {
        // ql[128] at 0, qh[64] at 128, int8 scales[16] at 192, d at 208;
        // blocks are 210 bytes, so words may need stitching (dq_word).
        uint h = s >> 2, o = 8u * (s & 3u);
        uint oa = b + 64u * h + o, oh = b + 128u + 32u * h + o;
        float d = dq_half(b + 208u);
        for (uint w = 0u; w < 2u; w++) {
            uint qa = dq_word(oa + 4u * w), qb = dq_word(oa + 32u + 4u * w), qh = dq_word(oh + 4u * w);
            q[w] = mant4((qa & 0x0F0F0F0Fu) | ((qh << 4) & 0x30303030u), 0u);
            q[2u + w] = mant4((qb & 0x0F0F0F0Fu) | ((qh << 2) & 0x30303030u), 0u);
            q[4u + w] = mant4(((qa >> 4) & 0x0F0F0F0Fu) | (qh & 0x30303030u), 0u);
            q[6u + w] = mant4(((qb >> 4) & 0x0F0F0F0Fu) | ((qh >> 2) & 0x30303030u), 0u);
        }
        for (uint g = 0u; g < 4u; g++) {
            // scales[8h + o/16 + 2g] scale plane g of this slice's values.
            uint sb = b + 192u + 8u * h + (o >> 4) + 2u * g;
            a[g] = d * float(bitfieldExtract(int(W[sb >> 2]), int((sb & 3u) * 8u), 8));
            c[g] = -32.0 * a[g];
        }
    } else if (QTYPE == T_Q8_0) {
        // Exact conversion (see MANT).
        a[0] = dq_half(b);
        for (uint i = 0u; i < 8u; i++) {
            q[i] = dq_i8x4(dq_word(b + 2u + 4u * i));
        }
    } else if (QTYPE == T_Q4_0) {
        a[0] = a[1] = dq_half(b);
        c[0] = c[1] = -8.0 * a[0];
        for (uint i = 0u; i < 4u; i++) {
            uint w = dq_word(b + 2u + 4u * i);
            q[i] = mant4(w, 0u);
            q[4u + i] = mant4(w, 4u);
        }
    } else {
        // Rows hold a multiple of 4 values, so a partial slice ends on a
        // vec4 boundary; nothing past the row is read.
        for (uint i = 0u; i < 8u; i++) {
            q[i] = vec4(0.0);
            if (4u * i >= lim) {
                continue;
            }
            if (QTYPE == T_F32) {
                q[i] = uintBitsToFloat(W4[(b >> 4) + i]);
            } else {
                uint w0 = W[(b >> 2) + 2u * i], w1 = W[(b >> 2) + 2u * i + 1u];
                if (QTYPE == T_F16) {
                    q[i] = vec4(unpackHalf2x16(w0), unpackHalf2x16(w1));
                } else {
                    q[i] = uintBitsToFloat(uvec4(w0 << 16, w0 & 0xFFFF0000u, w1 << 16, w1 & 0xFFFF0000u));
                }
            }
        }
    }
    // sum (a*q + c)*x = a*2^NB*(sum f*x - sum x) + c*sum x.
    float scale = MANT ? float(1u << NB) : 1.0;
    for (uint g = 0u; g < 4u; g++) {
        A[g] = a[g] * scale;
        C[g] = MANT ? c[g] - A[g] : c[g];
    }
}

#define RED_N (ROWS * NCOLS)
#include "reduce.glsl"

void main() {
    // The grid may be folded into 2D to stay under the 65535 limit per dimension.
    uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (group >= pc.groups) {
        return; // whole workgroup: barriers below stay uniform
    }
    uint row0 = group * ROWS;
    uint slices = QFLOAT ? (pc.K + 31u) / 32u : pc.K / QK * SPB;
    uint xrow4 = pc.K / 4u; // vec4s per x row

    for (uint i = 0u; i < RED_N; i++) {
        red_v[i] = 0.0;
    }
    for (uint sl0 = gl_LocalInvocationID.x * UNROLL; sl0 < slices; sl0 += WG * UNROLL) {
        for (uint u = 0u; u < UNROLL; u++) {
            uint sl = sl0 + u;
            if (sl >= slices) {
                break;
            }
            uint blk = sl / SPB, s = sl % SPB;
            // First value of the block (floats: of the slice) and its byte
            // offset within a row.
            uint k0 = QFLOAT ? 32u * sl : blk * QK;
            uint boff = QFLOAT ? k0 * ESIZE : blk * QBYTES;
            uint lim = pc.K - k0;

            // This slice's activations (and their group sums) for every
            // column, loaded once for all ROWS rows.
            vec4 xv[NCOLS * 8u];
            float xs[NCOLS * 4u];
            for (uint n = 0u; n < NCOLS; n++) {
                for (uint g = 0u; g < NG; g++) {
                    vec4 sum = vec4(0.0);
                    for (uint i = 0u; i < GV; i++) {
                        uint k4 = (k0 + slice_val(s, g)) / 4u + i;
                        vec4 v = vec4(0.0);
                        if (!QFLOAT || 4u * (g * GV + i) < lim) {
                            v = x4[n * xrow4 + k4];
                        }
                        xv[n * 8u + g * GV + i] = v;
                        sum += v;
                    }
                    xs[n * 4u + g] = dot(sum, vec4(1.0));
                }
            }
            for (uint r = 0u; r < ROWS; r++) {
                // Rows past M are clamped rather than skipped (their sums
                // are never written): the loop stays branch-free, so the
                // compiler can issue every row's loads before using any.
                uint row = min(row0 + r, pc.M - 1u);
                vec4 q[8];
                float A[4], C[4];
                dq_slice(row * pc.rowBytes + boff, s, lim, q, A, C);
                for (uint n = 0u; n < NCOLS; n++) {
                    float acc = 0.0;
                    for (uint g = 0u; g < NG; g++) {
                        float d = 0.0;
                        for (uint i = 0u; i < GV; i++) {
                            d += dot(q[g * GV + i], xv[n * 8u + g * GV + i]);
                        }
                        acc += A[g] * d + C[g] * xs[n * 4u + g];
                    }
                    red_v[r * NCOLS + n] += acc;
                }
            }
        }
    }

    wg_reduce(false);
    if (gl_LocalInvocationID.x == 0u) {
        for (uint r = 0u; r < ROWS; r++) {
            if (row0 + r < pc.M) {
                for (uint n = 0u; n < NCOLS; n++) {
                    uint i = n * pc.M + row0 + r;
                    dst[i] = red_v[r * NCOLS + n] + (RESID ? res[i] : 0.0);
                }
            }
        }
    }
}
