// matvec_coopmat: dst[n][m] = s[n] * sum_k W[m][k] * xh[n][k] for narrow
// batches (up to 64 columns: sequences decoding together, short prompts),
// on the matrix units (coopmat.glsl), streaming the weights as the
// matrix-vector kernels do.
//
// matmul_coopmat decodes a workgroup's weight tile into shared memory with
// workgroup barriers around it: at a few dozen columns the products are
// nearly free and those barriers, with every subgroup waiting on the
// slowest decode, are the cost. Here each subgroup owns a block of RB =
// FM*CM_M weight rows and walks K by itself: its lanes decode the block's
// next BK values into the subgroup's own region of shared memory (f16, the
// raw words of Q4_K/Q5_K fetched a step ahead), a subgroup barrier, and
// the A fragments come from there. No subgroup waits on another inside the
// K loop. The activations (quantize_f16.comp's f16 copy, column-major B
// fragments) are read straight from the storage buffer: a few hundred KiB
// that every row block shares, hot in the caches. The copy is in
// quantize_f16's blocked layout (16 values of K for every column, then the
// next 16), so that a fragment is 512 contiguous bytes: a fragment of whole
// rows touched a cache line per column, and on an H100 those touches took
// most of the kernel's time (docs/KERNELS.md).
//
// Where the matrix has too few row blocks to fill the device (the k and v
// projections), SPLIT subgroups share a row block, each taking every
// SPLIT-th step of K, and their accumulators are added through shared
// memory once, after the loop. A workgroup holds NSG/SPLIT row blocks; its
// y index picks FN*CM_N of the columns (the Go side sizes FN so that one
// workgroup row takes all of them where it can).
//
// BK divides K (so no step is partial and no B fragment reads past a row)
// and spans whole runs of dequant.glsl's pieces; xh's blocked layout holds
// XCOLS = gridY*FN*CM_N columns, those past N read by B fragments but
// reaching only columns that are never written. Rows of a block past M
// decode row M-1 again, whose products are never written either.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 128;  // NSG subgroups x their invocations
layout(constant_id = 1) const uint QTYPE = 12;
layout(constant_id = 2) const uint NSG = 4;   // subgroups per workgroup
layout(constant_id = 3) const uint SPLIT = 1; // subgroups per row block (divides NSG)
layout(constant_id = 4) const uint FM = 1;    // fragments per row block along M
layout(constant_id = 5) const uint FN = 4;    // fragments along N per workgroup
layout(constant_id = 6) const uint BK = 64;   // values of K per step
layout(constant_id = 7) const uint CM_M = 16;
layout(constant_id = 8) const uint CM_N = 16;
layout(constant_id = 9) const uint CM_K = 16;
layout(constant_id = 10) const uint SGV = 32; // invocations per subgroup (emulation)
// RESID adds r to the result as it is written (a residual connection), as
// matvec.glsl does; dst may be r.
layout(constant_id = 11) const bool RESID = false;

layout(binding = 0) writeonly buffer Dst { float dst[]; };
layout(binding = 1) readonly buffer Wts { uint W[]; };
// The same bytes as 16- and 8-byte words (dequant.glsl's DQ_WIDE; the Go
// side checks that Q4_K and Q5_K weights start on 16 bytes).
layout(binding = 1) readonly buffer Wts4 { uvec4 W4[]; };
layout(binding = 1) readonly buffer Wts2 { uvec2 W2[]; };
#define DQ_WIDE
// xh: XCOLS columns of K f16 values in blocks of 16 along K, then XCOLS
// f32 column scales (quantize_f16.comp, blocked).
layout(binding = 2) readonly buffer XH4 { uvec4 xh4[]; };
layout(binding = 2) readonly buffer XS { float xs[]; };
layout(binding = 3) readonly buffer R { float res[]; };

layout(push_constant) uniform Push {
    uint M;        // rows of W
    uint N;        // columns (tokens)
    uint K;        // values per row, a multiple of BK
    uint rowBytes; // bytes per row of W
} pc;

#include "dequant.glsl"
#include "coopmat.glsl"

const uint SGS = WG / NSG;        // invocations per subgroup
const uint RB = FM * CM_M;        // rows per block
const uint RBW = (NSG / SPLIT) * RB; // rows per workgroup
const uint PB = BK / 16u;         // 16-value pieces per row of a step
const uint PPL = (RB * PB + SGS - 1u) / SGS; // pieces per lane per step
const uint SA = BK / 4u + 2u;     // shA row stride, f16vec4s (16 bytes of padding)
const uint CF = CM_M * CM_N;      // values per accumulator fragment
const uint KF = BK / CM_K;        // fragments along K per step

#define STAGE_VEC4S (NSG * RB * SA)
#include "f16stage.glsl"
shared float shC[NSG * CF];

#ifdef COOPMAT_EMULATE
// The virtual subgroups are not the hardware's: their stages are ordered
// with workgroup barriers, which every subgroup reaches together (the K
// loop runs the same number of trips in all of them).
#define SG_SYNC() barrier()
#define SG_LANE (gl_LocalInvocationIndex % SGS)
// b[k][n] = the f16 at half (off8 + n*stride8)*8 + k of xh.
#define LOAD_XT(b, off8, stride8)                               \
    for (uint cm_e = 0u; cm_e < CM_K * CM_N; cm_e++) {          \
        uint cm_h = 8u * ((off8) + (cm_e % CM_N) * (stride8)) + cm_e / CM_N; \
        (b)[cm_e] = float16_t(unpackHalf2x16(xh4[cm_h >> 3][(cm_h >> 1) & 3u])[cm_h & 1u]); \
    }
#else
#extension GL_KHR_shader_subgroup_basic : require
#define SG_SYNC() subgroupMemoryBarrierShared(); subgroupBarrier()
#define SG_LANE gl_SubgroupInvocationID
// A uvec4 array read as consecutive f16 values: offset and stride count
// uvec4s (8 values).
#define LOAD_XT(b, off8, stride8) coopMatLoad(b, xh4, off8, stride8, gl_CooperativeMatrixLayoutColumnMajor)
#endif

#define XCOLS (gl_NumWorkGroups.y * FN * CM_N)
// XAT is the place in xh4 (uvec4s of 8 halves) of values k.. of column c,
// k a multiple of CM_K, which divides 16 (the Go side checks); XSTRIDE the
// uvec4s from a column's values to the next column's.
#define XAT(c, k) ((((k) >> 4) * XCOLS + (c)) * 2u + (((k) & 15u) >> 3))
#define XSTRIDE 2u

// Q4_K, Q5_K and Q6_K weights are fetched a step ahead (dq_k_fetch,
// dq_q6_fetch): a lane's words for the next step are in flight while this
// step decodes and multiplies, as the matrix-vector kernels keep theirs.
const bool Q6RAW = QTYPE == T_Q6_K; // Q6Raw words, else KRaw
const bool PREFETCH = (QTYPE == T_Q4_K || QTYPE == T_Q5_K || Q6RAW) && PPL <= 8u;
KRaw araw[PREFETCH && !Q6RAW ? PPL : 1u];
Q6Raw araw6[PREFETCH && Q6RAW ? PPL : 1u];

// A step's B fragments are loaded a step ahead as well, where they fit in
// registers: each load comes from L2, and loaded just before its product
// the subgroup would wait out that latency KF*FN times a step.
const bool BAHEAD = KF * FN <= 16u;

// pieceAt is piece j of this lane in a step: its row in the block and its
// offset in the step; false past the block's pieces.
bool pieceAt(uint lane, uint j, out uint r, out uint q) {
    uint it = lane + j * SGS;
    r = it / PB;
    q = 16u * (it % PB);
    return it < RB * PB;
}

// rowOf is the weight row that block row r reads: past M, the last row.
uint rowOf(uint m0, uint r) { return min(m0 + r, pc.M - 1u); }

void fetchA(uint lane, uint m0, uint k0) {
    [[unroll]] for (uint j = 0u; j < PPL; j++) {
        uint r, q;
        if (pieceAt(lane, j, r, q)) {
            uint k = k0 + q;
            uint b = rowOf(m0, r) * pc.rowBytes + (k / QK) * QBYTES;
            if (Q6RAW) {
                araw6[j] = dq_q6_fetch(b, (k % QK) / 16u);
            } else {
                araw[j] = dq_k_fetch(b, (k % QK) / 16u);
            }
        }
    }
}

// storeA writes a decoded piece (h, of piece p of its block) of block row
// r at step offset q into the subgroup's stage.
void storeA(uint base, uint r, uint q, uint p, uvec2 h[4]) {
    // The piece's block starts q - 16p values into the step (before it,
    // where a step is part of a block: the unsigned sum wraps back), and
    // stagePiece places each vec4 within the block.
    stagePiece(4u * (base + r * SA) + q - 16u * p, p, h);
}

void decodeA(uint lane, uint base, uint m0, uint k0) {
    [[unroll]] for (uint j = 0u; j < PPL; j++) {
        uint r, q;
        if (pieceAt(lane, j, r, q)) {
            uint k = k0 + q;
            uint p = (k % QK) / 16u;
            uvec2 h[4];
            uint b = rowOf(m0, r) * pc.rowBytes + (k / QK) * QBYTES;
            if (PREFETCH && Q6RAW) {
                dq_q6_decode_h(araw6[j], b, p, h);
            } else if (PREFETCH) {
                dq_k_decode_h(araw[j], p, h);
            } else {
                dq_piece_h(b, p, pc.K - (k / QK) * QK, h);
            }
            storeA(base, r, q, p, h);
        }
    }
}

void main() {
    uint sg = CM_SUBGROUP, lane = SG_LANE;
    uint part = sg % SPLIT;
    uint m0 = gl_WorkGroupID.x * RBW + (sg / SPLIT) * RB;
    uint n0 = gl_WorkGroupID.y * FN * CM_N;
    uint base = sg * RB * SA; // the subgroup's stage in shA, f16vec4s

    CM_DECL_C(acc, FM * FN);
    [[unroll]] for (uint f = 0u; f < FM * FN; f++) {
        CM_ZERO(acc[f]);
    }
    uint steps = pc.K / BK;
    uint trips = (steps + SPLIT - 1u) / SPLIT;
    if (PREFETCH && part < steps) {
        fetchA(lane, m0, part * BK);
    }
    CM_DECL_B(bq, BAHEAD ? KF * FN : 1u);
    if (BAHEAD && part < steps) {
        [[unroll]] for (uint q = 0u; q < KF * FN; q++) {
            LOAD_XT(bq[q], XAT(n0 + (q / KF) * CM_N, part * BK + (q % KF) * CM_K), XSTRIDE);
        }
    }
    for (uint i = 0u; i < trips; i++) {
        uint s = i * SPLIT + part;
        uint k0 = s * BK;
        SG_SYNC(); // the previous step's readers of the stage are done
        if (s < steps) {
            decodeA(lane, base, m0, k0);
            if (PREFETCH && s + SPLIT < steps) {
                fetchA(lane, m0, k0 + SPLIT * BK);
            }
        }
        SG_SYNC(); // the stage is written
        if (s < steps) {
            [[unroll]] for (uint x = 0u; x < KF; x++) {
                CM_DECL_A(a, FM);
                [[unroll]] for (uint f = 0u; f < FM; f++) {
                    LOAD_STAGE(a[f], base + f * CM_M * SA + x * (CM_K / 4u), SA);
                }
                [[unroll]] for (uint j = 0u; j < FN; j++) {
                    if (BAHEAD) {
                        [[unroll]] for (uint f = 0u; f < FM; f++) {
                            CM_MULADD(acc[f * FN + j], a[f], bq[j * KF + x]);
                        }
                    } else {
                        CM_DECL_B(b, 1);
                        LOAD_XT(b[0], XAT(n0 + j * CM_N, k0 + x * CM_K), XSTRIDE);
                        [[unroll]] for (uint f = 0u; f < FM; f++) {
                            CM_MULADD(acc[f * FN + j], a[f], b[0]);
                        }
                    }
                }
            }
            if (BAHEAD && s + SPLIT < steps) {
                [[unroll]] for (uint q = 0u; q < KF * FN; q++) {
                    LOAD_XT(bq[q], XAT(n0 + (q / KF) * CM_N, k0 + SPLIT * BK + (q % KF) * CM_K), XSTRIDE);
                }
            }
        }
    }

    // Every subgroup stores its f-th fragment column-major into its part of
    // shC; then the workgroup adds the SPLIT parts of each row block and
    // writes them out, consecutive invocations along m.
    const uint blocks = NSG / SPLIT;
    [[unroll]] for (uint f = 0u; f < FM * FN; f++) {
        barrier(); // the previous fragment's readers of shC are done
        CM_STORE_CT(acc[f], shC, sg * CF, CM_M);
        barrier();
        for (uint it = gl_LocalInvocationIndex; it < blocks * CF; it += WG) {
            uint blk = it / CF, e = it % CF;
            float sum = 0.0;
            for (uint p = 0u; p < SPLIT; p++) {
                sum += shC[(blk * SPLIT + p) * CF + e];
            }
            uint m = gl_WorkGroupID.x * RBW + blk * RB + (f / FN) * CM_M + e % CM_M;
            uint n = n0 + (f % FN) * CM_N + e / CM_M;
            if (m < pc.M && n < pc.N) {
                uint i = n * pc.M + m;
                dst[i] = sum * xs[XCOLS * pc.K / 2u + n] + (RESID ? res[i] : 0.0);
            }
        }
    }
}
