// matvec.glsl: dst[n][m] = sum_k W[m][k] * x[n][k] for the few (NCOLS <= 8
// at a time) activation columns of decode, W in any dequant.glsl format. Included by
// two modules: matvec.comp (f32 activations, every weight type) and
// matvec_q8.comp (Q8X defined: activations rounded to 8 bits by
// quantize_q8.comp, quantized weights only). They are two modules because
// the second needs the integer dot product capability, which a module may
// only declare on devices that have it.
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
// With Q8X the slice's quants stay integers and meet 8-bit activations in
// packed 4-way integer dot products (one instruction per 4 products on
// devices that accelerate them, where the f32 path spends about three),
// and the activations take a quarter of the registers and cache traffic.
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


#if !defined(STACK) && !defined(MOE_ID)
// Coherent: with NORM_OUT the last workgroup of a block reads it back
// (norm_fold.glsl).
layout(binding = 0) coherent buffer Dst { float dst[]; };
// COLS, the columns of x (0: NCOLS), may exceed NCOLS: the workgroup then
// takes them NCOLS at a time (a batch of sequences decoding together). Its
// rows' weights are read from memory for the first group and come from the
// cache for the others, so bytes stay those of one product while the
// arithmetic per column is that of decode.
layout(constant_id = 7) const uint COLS = 0;
#define XCOLS (COLS == 0u ? NCOLS : COLS)
#else
#define XCOLS NCOLS
#endif
layout(binding = 1) readonly buffer Wts { uint W[]; };
// The same bytes as 16-byte words (the Go side checks the binding offset is
// a multiple of 16).
layout(binding = 1) readonly buffer Wts4 { uvec4 W4[]; };
#ifdef Q8X
// The q8 layout (quantize_q8.comp): NCOLS rows of K int8 values, 4 to a
// word, then one f32 scale per 32 values. K is a multiple of 32, so the
// scales start on a word and every group's values on a whole word.
layout(binding = 2) readonly buffer XQ2 { uvec2 xq2[]; };
layout(binding = 2) readonly buffer XQ4 { uvec4 xq4[]; };
layout(binding = 2) readonly buffer XD { float xd[]; };
#else
layout(binding = 2) readonly buffer X { vec4 x4[]; };
#endif
#ifdef MOE_ID
// The expert variant's bindings, push constants and row map.
#include "matvec_id.glsl"
#elif !defined(STACK)
layout(binding = 3) readonly buffer R { float res[]; };

layout(push_constant) uniform Push {
    uint M;        // rows of W
    uint K;        // values per row
    uint rowBytes; // bytes per row of W
    uint groups;   // workgroups doing work: ceil(M / ROWS)
} pc;

// ROW_BASE(r) is the byte offset in W of the workgroup's row r; rows past
// M are clamped rather than skipped (their sums are never written): the
// loop stays branch-free, so the compiler can issue every row's loads
// before using any.
uint row0; // the workgroup's first row
#define ROW_BASE(r) (min(row0 + (r), pc.M - 1u) * pc.rowBytes)
#endif
#ifndef XBASE
#define XBASE 0u // the first x row's place in x4 (matvec_id.glsl: the slot's)
#endif
#ifndef Q8ROW
#define Q8ROW 0u      // Q8X: the first x row (matvec_id.glsl: the slot's)
#define Q8ROWS XCOLS  // Q8X: the rows the q8 layout holds, before its scales
#endif
#ifndef SLOT_W
#define SLOT_W 1.0 // the weight of each row's sums (matvec_id.glsl's MOE_SUM: the slot's)
#endif

#include "dequant.glsl"

#include "slices.glsl"

// The f32 path decodes quants of NB bits as the floats 1 + q / 2^NB: q goes
// straight into the top of the mantissa of 1.0 with one shift and one
// and-or, where a conversion would cost a quarter-rate instruction (NVIDIA)
// or a subtract more. The map of each group absorbs the offset: sum q*x =
// 2^NB * (sum f*x - sum x). The leading 1 costs each product f*x NB of its
// 24 significant bits of q*x, still far finer than the quantization; for
// Q8_0 only 16 would be left, so Q8_0 (like the float types) converts
// exactly instead (MANT false). As macros of the type t, like
// dequant.glsl's: the functions below take the type of the rows they read.
#define QT_MANT(t) (!QT_FLOAT(t) && (t) != T_Q8_0)
#define QT_NB(t) ((t) == T_Q6_K ? 6u : ((t) == T_Q5_K ? 5u : 4u))
#define QT_ESIZE(t) ((t) == T_F32 ? 4u : 2u) // bytes per value of float rows

// mant4 returns the 4 floats 1 + q/2^NB for the NB-bit fields (NB of type
// qt) at bits lo, lo+8, lo+16 and lo+24 of w (one per byte; higher bits
// are ignored).
vec4 mant4(uint qt, uint w, uint lo) {
    uint top = 23u - QT_NB(qt); // the field's place in the mantissa
    uint mask = ((1u << QT_NB(qt)) - 1u) << top;
    uvec4 f;
    for (uint k = 0u; k < 4u; k++) {
        uint at = lo + 8u * k;
        f[k] = ((at <= top ? w << (top - at) : w >> (at - top)) & mask) | 0x3F800000u;
    }
    return uintBitsToFloat(f);
}

#ifdef Q8X
// In 8-bit products of several columns only Q4_K and Q5_K, whose weights
// are a*q + c with a min c of their own, need the activations' sums
// (QT_Q8SUMS). Q6_K's and Q4_0's offsets are a fixed multiple of the scale
// (a*(q - 32), d*(q - 8)): their quants are recentred to signed bytes
// instead, three operations per 4 quants and row, shared by every column,
// where the sums cost two integer dot products per 4 quants and column and
// a multiply-add per group. Products of one or two columns keep the sums,
// which then cost no more than the recentring (ACO's estimates on navi31,
// docs/AMD.md). Q8_0 has no offset and needs neither.
#define QT_RECENTRE(t) (((t) == T_Q6_K || (t) == T_Q4_0) && XCOLS > 2u)
#define QT_Q8SUMS(t) ((t) == T_Q4_K || (t) == T_Q5_K || ((t) != T_Q8_0 && !QT_RECENTRE(t)))

// q8_recentre makes dq_fields' unsigned Q6_K and Q4_0 quants the signed
// bytes q - 32 and q - 8, four at a time: with the top bit of every byte
// set no subtraction borrows across bytes, and flipping it back leaves
// (q - bias) mod 256. The offsets dq_fields returned are then spent.
void q8_recentre(uint qt, inout uint q[8]) {
    if (QT_RECENTRE(qt)) {
        uint bias = qt == T_Q6_K ? 0x20202020u : 0x08080808u;
        for (uint i = 0u; i < 8u; i++) {
            q[i] = ((q[i] | 0x80808080u) - bias) ^ 0x80808080u;
        }
    }
}
#endif

#ifndef Q8X
// dq_slice decodes slice s of the block of type qt at byte offset b
// (floats: the slice itself starts at b) into q[8] and the maps A, C of
// its groups: with f the values of group g (q[g*GV ..], GV vec4s) and x
// the activations they meet, the group's dot product is A[g] * sum f*x +
// C[g] * sum x. For quants f = 1 + q/2^NB (see NB); for Q8_0 f = q, for
// floats f is the weight (A = 1, C = 0).
// lim is the number of the row's values from the slice's first on; only
// float slices can be partial, and their values past it are 0.
void dq_slice(uint qt, uint b, uint s, uint lim, out vec4 q[8], out float A[4], out float C[4]) {
    float a[4], c[4];
    if (!QT_FLOAT(qt)) {
        uint u[8];
        dq_fields(qt, b, s, u, a, c);
        for (uint i = 0u; i < 8u; i++) {
            q[i] = QT_MANT(qt) ? mant4(qt, u[i], 0u) : dq_i8x4(u[i]);
        }
    } else {
        a = float[4](1.0, 1.0, 1.0, 1.0);
        c = float[4](0.0, 0.0, 0.0, 0.0);
        // Rows hold a multiple of 4 values, so a partial slice ends on a
        // vec4 boundary; nothing past the row is read.
        for (uint i = 0u; i < 8u; i++) {
            q[i] = vec4(0.0);
            if (4u * i >= lim) {
                continue;
            }
            if (qt == T_F32) {
                q[i] = uintBitsToFloat(W4[(b >> 4) + i]);
            } else {
                uint w0 = W[(b >> 2) + 2u * i], w1 = W[(b >> 2) + 2u * i + 1u];
                if (qt == T_F16) {
                    q[i] = vec4(unpackHalf2x16(w0), unpackHalf2x16(w1));
                } else {
                    q[i] = uintBitsToFloat(uvec4(w0 << 16, w0 & 0xFFFF0000u, w1 << 16, w1 & 0xFFFF0000u));
                }
            }
        }
    }
    // sum (a*q + c)*x = a*2^NB*(sum f*x - sum x) + c*sum x.
    float scale = QT_MANT(qt) ? float(1u << QT_NB(qt)) : 1.0;
    for (uint g = 0u; g < 4u; g++) {
        A[g] = a[g] * scale;
        C[g] = QT_MANT(qt) ? c[g] - A[g] : c[g];
    }
}
#endif

// The norm folded into the products around it (norm_fold.glsl): the
// plain products may write the residual a norm reads (RESID) or read that
// norm's q8 copy; the stacked ones read it; the expert variants neither.
#if defined(STACK)
#define NF_IN_ID 17
#define NF_PARTS 12
#elif !defined(MOE_ID)
#define NF_OUT_ID 8
#define NF_IN_ID 9
#define NF_BIND 4
#define NF_PARTS 8
#endif
#include "norm_fold.glsl"

// red_v holds ROWS * NCOLS sums, then with NORM_IN each column's sum of
// squares of the residual its norm read (at RED_SS + n).
const uint RED_SS = ROWS * NCOLS;
#define RED_N (RED_SS + (NORM_IN ? NCOLS : 0u))
#include "reduce.glsl"

#ifdef STACK
// The stacked variant's bindings, push constants, row map and epilogue.
#include "matvec_stack.glsl"
#endif

// mv_slices adds the products of the workgroup's rows, of type qt, with
// columns c0 … c0+NCOLS-1 to red_v: each lane's slices (see the top).
// Columns past XCOLS repeat the last one (computed, never written), so
// every group runs the same code. With MOE_SUM the lanes take the slices
// of every slot of the token at once, slot j's slice s being item
// j·slices + s: the slots' rows are short (an expert's down product has
// K = 768, 24 slices), so one slot at a time left most lanes idle and
// made each lane wait out k loads in turn.
void mv_slices(uint qt, uint c0) {
    uint slices = QT_FLOAT(qt) ? (pc.K + 31u) / 32u : pc.K / QT_K(qt) * QT_SPB(qt);
#ifdef MOE_SUM
    uint items = slices * pc.k;
    for (uint sl0 = gl_LocalInvocationID.x * UNROLL; sl0 < items; sl0 += WG * UNROLL) {
        for (uint u = 0u; u < UNROLL; u++) {
            if (sl0 + u >= items) {
                break;
            }
            id_slot_set(id_token * pc.k + (sl0 + u) / slices);
            uint sl = (sl0 + u) % slices;
#else
    for (uint sl0 = gl_LocalInvocationID.x * UNROLL; sl0 < slices; sl0 += WG * UNROLL) {
        for (uint u = 0u; u < UNROLL; u++) {
            uint sl = sl0 + u;
            if (sl >= slices) {
                break;
            }
#endif
            uint blk = sl / QT_SPB(qt), s = sl % QT_SPB(qt);
            // First value of the block (floats: of the slice) and its byte
            // offset within a row.
            uint k0 = QT_FLOAT(qt) ? 32u * sl : blk * QT_K(qt);
            uint boff = QT_FLOAT(qt) ? k0 * QT_ESIZE(qt) : blk * QT_BYTES(qt);
            uint lim = pc.K - k0;

            // This slice's activations for every column, loaded once for
            // all ROWS rows, and per group the terms the rows share: the
            // f32 path's sum x; the q8 path's scale and scaled sum of the
            // 8-bit values (the products with the offsets C).
#ifdef Q8X
            uint xv[NCOLS * 8u];
            float xsc[NCOLS * 4u], xs[NCOLS * 4u];
            for (uint n = 0u; n < NCOLS; n++) {
                uint c = min(c0 + n, XCOLS - 1u);
                for (uint g = 0u; g < QT_NG(qt); g++) {
                    uint v = (Q8ROW + c) * pc.K + k0 + slice_val(qt, s, g); // a multiple of 4 * QT_GV(qt)
                    if (QT_GV(qt) == 8u) {
                        uvec4 w0 = xq4[v / 16u], w1 = xq4[v / 16u + 1u];
                        for (uint i = 0u; i < 4u; i++) {
                            xv[n * 8u + i] = w0[i];
                            xv[n * 8u + 4u + i] = w1[i];
                        }
                    } else if (QT_GV(qt) == 4u) {
                        uvec4 w = xq4[v / 16u];
                        for (uint i = 0u; i < 4u; i++) {
                            xv[n * 8u + g * 4u + i] = w[i];
                        }
                    } else {
                        uvec2 w = xq2[v / 8u];
                        xv[n * 8u + g * 2u] = w.x;
                        xv[n * 8u + g * 2u + 1u] = w.y;
                    }
                    int sum = 0;
                    if (QT_Q8SUMS(qt)) {
                        for (uint i = 0u; i < QT_GV(qt); i++) {
                            sum += sdot4(xv[n * 8u + g * QT_GV(qt) + i], 0x01010101u);
                        }
                    }
                    float d = xd[Q8ROWS * pc.K / 4u + v / 32u];
                    xsc[n * 4u + g] = d;
                    xs[n * 4u + g] = d * float(sum);
                }
            }
#else
            uint xrow4 = pc.K / 4u; // vec4s per x row
            vec4 xv[NCOLS * 8u];
            float xs[NCOLS * 4u];
            for (uint n = 0u; n < NCOLS; n++) {
                uint c = min(c0 + n, XCOLS - 1u);
                for (uint g = 0u; g < QT_NG(qt); g++) {
                    vec4 sum = vec4(0.0);
                    for (uint i = 0u; i < QT_GV(qt); i++) {
                        uint k4 = (k0 + slice_val(qt, s, g)) / 4u + i;
                        vec4 v = vec4(0.0);
                        if (!QT_FLOAT(qt) || 4u * (g * QT_GV(qt) + i) < lim) {
                            v = x4[XBASE + c * xrow4 + k4];
                        }
                        xv[n * 8u + g * QT_GV(qt) + i] = v;
                        sum += v;
                    }
                    xs[n * 4u + g] = dot(sum, vec4(1.0));
                }
            }
#endif
            for (uint r = 0u; r < ROWS; r++) {
#ifdef Q8X
                uint q[8];
                float A[4], C[4];
                dq_fields(qt, ROW_BASE(r) + boff, s, q, A, C);
                q8_recentre(qt, q);
#else
                vec4 q[8];
                float A[4], C[4];
                dq_slice(qt, ROW_BASE(r) + boff, s, lim, q, A, C);
#endif
                for (uint n = 0u; n < NCOLS; n++) {
                    float acc = 0.0;
                    for (uint g = 0u; g < QT_NG(qt); g++) {
#ifdef Q8X
                        int p = 0;
                        for (uint i = 0u; i < QT_GV(qt); i++) {
                            p += sdot4(q[g * QT_GV(qt) + i], xv[n * 8u + g * QT_GV(qt) + i]);
                        }
                        float d = xsc[n * 4u + g] * float(p);
                        if (!QT_Q8SUMS(qt)) {
                            acc += A[g] * d;
                            continue;
                        }
#else
                        float d = 0.0;
                        for (uint i = 0u; i < QT_GV(qt); i++) {
                            d += dot(q[g * QT_GV(qt) + i], xv[n * 8u + g * QT_GV(qt) + i]);
                        }
#endif
                        acc += A[g] * d + C[g] * xs[n * 4u + g];
                    }
                    red_v[r * NCOLS + n] += SLOT_W * acc;
                }
            }
        }
    }
}

void main() {
    // The grid may be folded into 2D to stay under the 65535 limit per dimension.
    uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
#ifdef STACK
    if (!stack_rows(group)) {
        return; // whole workgroup: barriers below stay uniform
    }
#elif defined(MOE_ID)
    if (!id_rows(group)) {
        return; // whole workgroup: barriers below stay uniform
    }
#else
    if (group >= pc.groups) {
        return; // whole workgroup: barriers below stay uniform
    }
    row0 = group * ROWS;
#endif
    // Columns c0 … c0+NCOLS-1 (mv_slices).
    for (uint c0 = 0u; c0 < XCOLS; c0 += NCOLS) {
        for (uint i = 0u; i < RED_N; i++) {
            red_v[i] = 0.0;
        }
#ifdef NF_PARTS
        if (NORM_IN) {
            for (uint n = 0u; n < NCOLS; n++) {
                red_v[RED_SS + n] = norm_parts(Q8ROW + min(c0 + n, XCOLS - 1u), pc.K);
            }
        }
#endif
#ifdef STACK
        // A stack's last matrix may be of a type of its own (stack_rows).
        if (LAST_QTYPE != QTYPE && st_mat == NMAT - 1u) {
            mv_slices(LAST_QTYPE, c0);
        } else {
            mv_slices(QTYPE, c0);
        }
#else
        mv_slices(QTYPE, c0);
#endif

        wg_reduce(false);
#ifdef NF_PARTS
        if (NORM_IN) {
            for (uint n = 0u; n < NCOLS; n++) {
                float s = norm_scale(red_v[RED_SS + n], pc.K);
                for (uint r = 0u; r < ROWS; r++) {
                    red_v[r * NCOLS + n] *= s;
                }
            }
        }
#endif
#if !defined(STACK) && !defined(MOE_ID)
        if (gl_LocalInvocationID.x == 0u) {
            for (uint r = 0u; r < ROWS; r++) {
                for (uint n = 0u; n < NCOLS; n++) {
                    if (row0 + r < pc.M && c0 + n < XCOLS) {
                        uint i = (c0 + n) * pc.M + row0 + r;
                        dst[i] = red_v[r * NCOLS + n] + (RESID ? res[i] : 0.0);
                    }
                }
            }
            if (NORM_OUT) {
                for (uint n = 0u; n < NCOLS; n++) {
                    if (c0 + n < XCOLS) {
                        norm_out(c0 + n, XCOLS, pc.M, row0, ROWS);
                    }
                }
            }
        }
#endif
    }
#ifdef STACK
    if (gl_LocalInvocationID.x == 0u) {
        stack_epilogue();
    }
#elif defined(MOE_SUM)
    if (gl_LocalInvocationID.x == 0u) {
        for (uint r = 0u; r < ROWS; r++) {
            if (row0 + r < pc.M) {
                uint i = id_token * pc.M + row0 + r;
                dst[i] = red_v[r] + res[i]; // NCOLS is 1
            }
        }
    }
#elif defined(MOE_GLU)
    if (gl_LocalInvocationID.x == 0u) {
        const uint RH = ROWS / 2u;
        for (uint r = 0u; r < RH; r++) {
            if (row0 + r < pc.M) {
                dst[id_slot * pc.M + row0 + r] = glu_act(GLU_ACT, vec4(red_v[r])).x * red_v[r + RH]; // NCOLS is 1
            }
        }
        glu_q8();
    }
#elif defined(MOE_ID)
    if (gl_LocalInvocationID.x == 0u) {
        for (uint r = 0u; r < ROWS; r++) {
            if (row0 + r < pc.M) {
                dst[id_slot * pc.M + row0 + r] = red_v[r]; // NCOLS is 1
            }
        }
    }
#endif
}
