// matmul_coopmat: dst[n][m] = s[n] * sum_k W[m][k] * xh[n][k] for prefill,
// on the matrix units (coopmat.glsl): weights of any dequant.glsl type are
// decoded into shared memory as f16, activations come as f16 rows with one
// power-of-two scale per row s[n] (quantize_f16.comp), and the products
// accumulate in f32.
//
// A workgroup computes a BM x BN tile of dst (weight rows x activation
// columns); each of its subgroups a WM x WN part of it, as (WM/CM_M) x
// (WN/CM_N) accumulator fragments. K advances BK values at a time, the
// weight tile decoded once per step; BK spans whole runs of pieces (64
// values of the K-quants, f16stage.glsl's, a block of the others), the Go
// side checks. The activations follow in chunks of KC values. Both
// stages are arrays of 16-byte words on the matrix units (f16vec4s in the
// emulation), their rows padded by 8 halves (16 bytes) against bank
// conflicts. The loops over a chunk's fragments, a step's chunks and a
// lane's staged words and pieces are unrolled by request: their trip
// counts are specialization constants, and NVIDIA's compiler left them
// rolled, computing the fragments' addresses, indexing the prefetched words
// and issuing the pieces' loads one after another at run time
// (docs/KERNELS.md).
// The result leaves through a small shared stage, one fragment per
// subgroup at a time, so that edge tiles need no special case and each
// column gets its scale.
//
// Built as matmul_coopmat.comp (and its emulation), and with MOE_ID as
// matmul_coopmat_id.comp (and matmul_coopmat_emu_id.comp), the gathered
// product of a mixture-of-experts prefill (matmul_cols.glsl).
//
// With COOP_INT8 defined (matmul_coopmat_i8*.comp), the integer variant:
// the activations come in matvec_q8's layout (quantize_q8.comp: int8, one
// f32 scale per 32 values) and the weights' quants stay integers
// (slices.glsl), so both stages hold bytes and the products are int8 x
// int8 -> int32 fragments (CM_K of the device's integer shape). A run of
// values that share one weight scale (RUN: 16 for Q6_K, 32 for the
// others; a block of activations is 32) is multiplied into a fresh int32
// fragment, which is converted and added to the f32 accumulators times
// its rows' weight scales and its columns' activation scales:
//   acc += float(sum_k qw qx) * a[m] * dx[n]  (+ c[m] * dx[n] * sum_k qx[n])
// the second term for Q4_K/Q5_K, whose weights are a*q + c with a 6-bit
// min c per 32 values. Q6_K and Q4_0 quants are recentred to signed bytes
// (q - 32, q - 8), so they need no such term. Where CM_K is twice RUN
// (Q6_K on a K = 32 shape), a run is staged as CM_K bytes with the other
// half zero (EXP = 2), so a product covers one run.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 128;  // subgroups x their invocations
layout(constant_id = 1) const uint QTYPE = 12;
layout(constant_id = 2) const uint BM = 64;
layout(constant_id = 3) const uint BN = 64;
layout(constant_id = 4) const uint WM = 32;
layout(constant_id = 5) const uint WN = 32;
layout(constant_id = 6) const uint BK = 256;  // whole runs of pieces (above)
layout(constant_id = 7) const uint KC = 64;   // divides BK; a multiple of CM_K and of 8
layout(constant_id = 8) const uint CM_M = 16;
layout(constant_id = 9) const uint CM_N = 16;
layout(constant_id = 10) const uint CM_K = 16;
layout(constant_id = 11) const uint SGV = 32; // invocations per subgroup (emulation)
// With COOP_SPLIT (matmul_coopmat_split.comp and its emulation; plain f16
// products only), workgroup z of the dispatch takes the z-th of KSPLIT
// runs of whole BK steps of K and writes its partial product to dst rows
// z·N … (split_sum.comp adds them): a narrow batch has too few tiles to
// keep the device busy, each walking all of K. The other builds have
// KSPLIT 1 folded in, so prefill's pipelines are what they were.
#ifdef COOP_SPLIT
layout(constant_id = 12) const uint KSPLIT = 1;
#define K_BEG kBeg
#define K_END kEnd
#define DST_ROW(n) (gl_WorkGroupID.z * pc.N + DROW(n))
#else
#define K_BEG 0u
#define K_END pc.K
#define DST_ROW(n) DROW(n)
#endif

layout(binding = 0) writeonly buffer Dst { float dst[]; };
layout(binding = 1) readonly buffer Wts { uint W[]; };
layout(binding = 1) readonly buffer Wts4 { uvec4 W4[]; };
#ifdef COOP_INT8
// xq: N rows of K int8 values, then one f32 scale per 32 (q8.glsl).
layout(binding = 2) readonly buffer XQ4 { uvec4 xq4[]; };
layout(binding = 2) readonly buffer XD { float xd[]; };
#else
// The weights as 8-byte words too (dequant.glsl's DQ_WIDE; the Go side
// checks that Q4_K and Q5_K weights start on 16 bytes).
layout(binding = 1) readonly buffer Wts2 { uvec2 W2[]; };
#define DQ_WIDE
// xh: N rows of K f16 values, then N f32 row scales.
layout(binding = 2) readonly buffer XH4 { uvec4 xh4[]; };
layout(binding = 2) readonly buffer XS { float xs[]; };
#endif

// K, the values per row, is a multiple of 8.
#include "matmul_cols.glsl"
#include "dequant.glsl"
#ifdef COOP_INT8
#include "slices.glsl"
#endif
#include "coopmat.glsl"

const uint FM = WM / CM_M;       // fragments per subgroup along M
const uint FN = WN / CM_N;       // ... along N
const uint SGM = BM / WM;        // subgroups along M
const uint NSG = SGM * (BN / WN);
const uint CF = CM_M * CM_N;     // values per accumulator fragment

// The subgroup's accumulators (a global, so that the integer variant's
// product can live in a function of its own).
CM_DECL_C(acc, FM * FN);

#ifdef COOP_INT8
#include "matmul_coopmat_i8.glsl"
#else
const uint SA = BK / 4u + 2u;    // shA row stride, f16vec4s
const uint SB = KC / 4u + 2u;    // shB row stride, f16vec4s
const uint PA = BK / 16u;        // 16-value pieces per weight row of a tile

#define STAGE_VEC4S (BM * SA)
#include "f16stage.glsl"
// The activations' stage, like shA (f16stage.glsl), is an array of 16-byte
// words on the matrix units: a chunk's word is one store, and fragment
// loads read whole words. The emulation keeps f16vec4s.
#ifdef COOPMAT_EMULATE
shared f16vec4 shB[BN * SB];

// stageB8 writes the 8 halves q at place o (f16vec4s; even).
void stageB8(uint o, uvec4 q) {
    shB[o] = f16vec4(unpackFloat2x16(q.x), unpackFloat2x16(q.y));
    shB[o + 1u] = f16vec4(unpackFloat2x16(q.z), unpackFloat2x16(q.w));
}

#define LOAD_B_STAGE(b, off, stride) CM_LOAD_BT4(b, shB, off, stride)
#else
shared uvec4 shB[BN * SB / 2u];

void stageB8(uint o, uvec4 q) { shB[o >> 1] = q; }

#define LOAD_B_STAGE(b, off, stride) coopMatLoad(b, shB, (off) / 2u, (stride) / 2u, gl_CooperativeMatrixLayoutColumnMajor)
#endif

const uint APL = (BM * PA + WG - 1u) / WG; // 16-value pieces a lane, at most
const uint AUN = APL < 4u ? APL : 4u;      // ... of them in loadA's unrolled loop

// loadPiece decodes piece it of the step at k0 (rows m0..) into shA:
// dequant.glsl's order, so that neighbouring invocations read one span of
// a block. Rows past M and values past K read as zero.
void loadPiece(uint m0, uint k0, uint it) {
    uint r = it / PA, k = k0 + 16u * (it % PA);
    uint blk = k / QK, p = (k % QK) / 16u;
    uvec2 h[4] = uvec2[4](uvec2(0u), uvec2(0u), uvec2(0u), uvec2(0u));
    if (m0 + r < pc.M && k < pc.K) {
        dq_piece_h(WROW(m0 + r) * pc.rowBytes + blk * QBYTES, p, pc.K - blk * QK, h);
    }
    stagePiece(4u * r * SA + blk * QK - k0, p, h); // in halves
}

// loadA decodes values k0..k0+BK of rows m0.. into shA, APL pieces an
// invocation. The first AUN are unrolled, so that their loads issue
// together; a lane holds a few on any device's tile, and the emulation's
// small workgroups, with dozens, would take minutes to build unrolled.
void loadA(uint m0, uint k0) {
    [[unroll]] for (uint j = 0u; j < AUN; j++) {
        uint it = gl_LocalInvocationIndex + j * WG;
        if (it < BM * PA) {
            loadPiece(m0, k0, it);
        }
    }
    for (uint j = AUN; j < APL; j++) {
        uint it = gl_LocalInvocationIndex + j * WG;
        if (it < BM * PA) {
            loadPiece(m0, k0, it);
        }
    }
}

// Q4_K, Q5_K and Q6_K weights are fetched a step ahead: fetchA loads the words
// of the next K step's pieces into registers (APL pieces a lane) while the
// current step's products run, and decodeA turns them into shA's f16 at
// the next step, so no step waits on a global load of its weights.
// Only where a lane holds a few pieces: small workgroups over large tiles
// (the emulation's, or a tuning sweep's) would hold dozens in registers.
const bool Q6RAW = QTYPE == T_Q6_K; // Q6Raw words, else KRaw
const bool PREFETCH = (QTYPE == T_Q4_K || QTYPE == T_Q5_K || Q6RAW) && APL <= 4u;
KRaw araw[PREFETCH && !Q6RAW ? APL : 1u];
Q6Raw araw6[PREFETCH && Q6RAW ? APL : 1u];

// pieceB is the byte offset of the block holding values k.. of tile row
// r, or 0 past the matrix (whose words read as zeros).
uint pieceB(uint m0, uint r, uint k) {
    return m0 + r < pc.M && k < pc.K ? WROW(m0 + r) * pc.rowBytes + (k / QK) * QBYTES : 0u;
}

void fetchA(uint m0, uint k0) {
    [[unroll]] for (uint j = 0u; j < APL; j++) {
        uint it = gl_LocalInvocationIndex + j * WG;
        uint r = it / PA, k = k0 + 16u * (it % PA);
        bool inside = it < BM * PA && m0 + r < pc.M && k < pc.K;
        if (Q6RAW) {
            Q6Raw z = Q6Raw(uvec3(0u), uvec3(0u), uvec3(0u), uvec2(0u), 0u);
            if (inside) {
                z = dq_q6_fetch(pieceB(m0, r, k), (k % QK) / 16u);
            }
            araw6[j] = z;
        } else {
            KRaw z = KRaw(uvec4(0u), uvec2(0u), uvec2(0u));
            if (inside) {
                z = dq_k_fetch(pieceB(m0, r, k), (k % QK) / 16u);
            }
            araw[j] = z;
        }
    }
}

void decodeA(uint m0, uint k0) {
    [[unroll]] for (uint j = 0u; j < APL; j++) {
        uint it = gl_LocalInvocationIndex + j * WG;
        if (it < BM * PA) {
            uint r = it / PA, k = k0 + 16u * (it % PA);
            uint blk = k / QK, p = (k % QK) / 16u;
            uvec2 h[4];
            if (Q6RAW) {
                dq_q6_decode_h(araw6[j], pieceB(m0, r, k), p, h);
            } else {
                dq_k_decode_h(araw[j], p, h);
            }
            stagePiece(4u * r * SA + blk * QK - k0, p, h);
        }
    }
}

// The activations are fetched a chunk ahead the same way where a lane
// holds at most 8 words of them (BPRE): fetchB loads values k..k+KC of
// columns n0.. of xh into registers (BPL 16-byte words a lane) while the
// current chunk's products run, and storeB writes them into shB; columns
// past N and values past K read as zero. Chunks are consecutive in k
// across steps, so the next chunk is always k + KC. Otherwise storeB
// loads and stores the chunk itself.
const uint BU = KC / 8u; // 16-byte words per column of a chunk
const uint BPL = (BN * BU + WG - 1u) / WG;
const bool BPRE = BPL <= 8u;
uvec4 braw[BPRE ? BPL : 1u];

uvec4 chunkWord(uint n0, uint k, uint it) {
    uint n = it / BU, u = it % BU;
    if (it < BN * BU && COL_OK(n0 + n) && k + 8u * u < pc.K) {
        return xh4[(XROW(n0 + n) * pc.K + k) / 8u + u];
    }
    return uvec4(0u);
}

void fetchB(uint n0, uint k) {
    if (BPRE) {
        [[unroll]] for (uint j = 0u; j < BPL; j++) {
            braw[j] = chunkWord(n0, k, gl_LocalInvocationIndex + j * WG);
        }
    }
}

// storeB writes chunk k of columns n0.. into shB: from braw with BPRE,
// else loading it now.
void storeB(uint n0, uint k) {
    [[unroll]] for (uint j = 0u; j < BPL; j++) {
        uint it = gl_LocalInvocationIndex + j * WG;
        if (it < BN * BU) {
            uint o = (it / BU) * SB + 2u * (it % BU);
            uvec4 q;
            if (BPRE) {
                q = braw[min(j, BPL - 1u)];
            } else {
                q = chunkWord(n0, k, it);
            }
            stageB8(o, q);
        }
    }
}
#endif // COOP_INT8

shared float shC[NSG * CF];

// A gathered tile holds at most BN pairs, often fewer: a subgroup skips the
// fragments whose columns are all past them, and one whose whole part is
// skips its products altogether, so the matrix units compute an expert's
// pairs rounded up to CM_N columns, not to BN (docs/KERNELS.md). The test
// is uniform in each subgroup, as cooperative-matrix operations require.
#ifdef MOE_ID
#define LIVE(c) ((c) < id_cols)
#else
#define LIVE(c) true
#endif

void main() {
    uint m0, n0;
    if (!tile_origin(m0, n0)) {
        return; // whole workgroup: barriers below stay uniform
    }
    uint sg = CM_SUBGROUP;
    uint am = (sg % SGM) * WM, an = (sg / SGM) * WN; // the subgroup's part of the tile

    [[unroll]] for (uint f = 0u; f < FM * FN; f++) {
        CM_ZERO(acc[f]);
    }
#ifdef COOP_SPLIT
    // This workgroup's run of K: whole steps, the last run ending at K.
    const uint kRun = (pc.K + KSPLIT * BK - 1u) / (KSPLIT * BK) * BK;
    const uint kBeg = gl_WorkGroupID.z * kRun;
    const uint kEnd = min(pc.K, kBeg + kRun);
#endif
#ifdef COOP_INT8
    zeroA();
#else
    if (PREFETCH) {
        fetchA(m0, K_BEG);
    }
#endif
    fetchB(n0, K_BEG);
    for (uint k0 = K_BEG; k0 < K_END; k0 += BK) {
        barrier(); // the previous step's readers of shA and shB are done
#ifdef COOP_INT8
        loadA(m0, k0);
#else
        if (PREFETCH) {
            decodeA(m0, k0);
            fetchA(m0, k0 + BK);
        } else {
            loadA(m0, k0);
        }
#endif
#ifdef COOP_INT8
        for (uint kc = 0u; kc < BK && k0 + kc < pc.K; kc += KC) {
#else
        // Unrolled as the loops above. Not in the integer variant: with
        // this loop and its storeB's unrolled, its Q6_K product ran 17 %
        // slower (docs/KERNELS.md).
        [[unroll]] for (uint kc = 0u; kc < BK; kc += KC) {
            if (k0 + kc >= pc.K) {
                break; // uniform: the last step ends at K
            }
#endif
            if (kc > 0u) {
                barrier(); // the previous chunk's readers of shB are done
            }
            storeB(n0, k0 + kc);
            fetchB(n0, k0 + kc + KC);
            barrier(); // shA and shB written
#ifdef COOP_INT8
            mulChunk(kc, am, an);
#else
            if (LIVE(an)) { // else the subgroup's part is all padding
                [[unroll]] for (uint kk = 0u; kk < KC; kk += CM_K) {
                    CM_DECL_A(a, FM);
                    CM_DECL_B(b, FN);
                    [[unroll]] for (uint i = 0u; i < FM; i++) {
                        LOAD_STAGE(a[i], (am + i * CM_M) * SA + (kc + kk) / 4u, SA);
                    }
                    [[unroll]] for (uint j = 0u; j < FN; j++) {
                        if (LIVE(an + j * CM_N)) {
                            LOAD_B_STAGE(b[j], (an + j * CM_N) * SB + kk / 4u, SB);
                        }
                    }
                    [[unroll]] for (uint i = 0u; i < FM; i++) {
                        [[unroll]] for (uint j = 0u; j < FN; j++) {
                            if (LIVE(an + j * CM_N)) {
                                CM_MULADD(acc[i * FN + j], a[i], b[j]);
                            }
                        }
                    }
                }
            }
#endif
        }
    }

    // Every subgroup stores its f-th fragment column-major into its part of
    // shC; then the workgroup writes all of them out, consecutive
    // invocations along m (consecutive addresses of dst).
    [[unroll]] for (uint f = 0u; f < FM * FN; f++) {
        barrier(); // the previous fragment's readers of shC are done
        CM_STORE_CT(acc[f], shC, sg * CF, CM_M);
        barrier();
        for (uint it = gl_LocalInvocationIndex; it < NSG * CF; it += WG) {
            uint s = it / CF, e = it % CF;
            uint m = m0 + (s % SGM) * WM + (f / FN) * CM_M + e % CM_M;
            uint n = n0 + (s / SGM) * WN + (f % FN) * CM_N + e / CM_M;
            if (m < pc.M && COL_OK(n)) {
#ifdef COOP_INT8
                dst[DROW(n) * pc.M + m] = shC[it]; // scaled as it accumulated
#else
                dst[DST_ROW(n) * pc.M + m] = shC[it] * xs[pc.N * pc.K / 2u + XROW(n)];
#endif
            }
        }
    }
}
