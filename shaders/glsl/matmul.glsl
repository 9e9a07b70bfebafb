// matmul: dst[n][m] = sum_k W[m][k] * x[n][k] for prefill (many columns),
// built as matmul.comp, and with MOE_ID as matmul_id.comp, the gathered
// product of a mixture-of-experts prefill (matmul_cols.glsl).
//
// A workgroup computes a BM x BN tile of dst (BM rows of W, BN columns of x);
// each invocation a TM x TN micro-tile, rows strided by BM/TM and columns by
// BN/TN so neighbouring invocations read neighbouring shared rows.
// K advances in tiles of BK values: whole superblocks for K-quants (256),
// whole blocks for Q8_0/Q4_0 (32), 64 for float types. Each K tile of W is
// dequantized once into shared memory (f32, or f16 pairs when A16 so that
// BM = 32 fits 32 KiB); x follows in chunks of BKB values (f32, or f16 pairs
// when B16). Shared rows are padded against bank conflicts (see ASTRIDE).
//
// The next chunk of x is loaded into registers while the current one is
// multiplied, so its global latency hides behind the arithmetic; each
// shared value read is converted at most once and used TN (A) or TM (B)
// times, so f16 tiles cost (TM [A16] + TN [B16]) / (TM TN) conversions per
// FMA. Accumulation is always f32.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64; // (BM/TM) * (BN/TN)
layout(constant_id = 1) const uint QTYPE = 12;
layout(constant_id = 2) const uint BM = 16;
layout(constant_id = 3) const uint BN = 16;
layout(constant_id = 4) const uint TM = 2;
layout(constant_id = 5) const uint TN = 2;
layout(constant_id = 6) const bool A16 = false; // weight tile as f16
// B16 stages activations as f16: half the shared memory of the chunk and
// a 2^-11 relative rounding of every x. Values beyond f16 range (65504)
// become infinities and the products NaN or inf: a model with such
// activations (rare outlier layers) must not use a B16 tile.
layout(constant_id = 7) const bool B16 = false;
layout(constant_id = 8) const uint KB = 32; // activation chunk: 16, 32 or 64 values of k

layout(binding = 0) writeonly buffer Dst { float dst[]; };
layout(binding = 1) readonly buffer Wts { uint W[]; };
layout(binding = 2) readonly buffer X { vec4 x4[]; };

#include "matmul_cols.glsl"
#include "dequant.glsl"

const uint BK = QFLOAT ? 64u : QK;
// A chunk never straddles two K tiles (Q8_0/Q4_0 tiles are 32 values).
const uint BKB = KB < BK ? KB : BK;
// Shared tiles are read as 16-byte words: 4 f32 or 8 f16 values of k.
// Rows are padded by one such word: an odd stride in words (4 mod 8 banks
// times an odd number) lets the 8 invocations of one 16-byte access phase
// read 8 different rows from 32 distinct banks.
const uint AW = A16 ? 1u : 2u;                 // 16-byte words per 8 values of k (weights)
const uint BW = B16 ? 1u : 2u;                 // ... (activations)
const uint ASTRIDE = BK / 8u * AW + 1u;        // uvec4s per weight row
const uint BSTRIDE = BKB / 8u * BW + 1u;       // uvec4s per activation row
const uint MT = BM / TM;                       // invocations along M
const uint NT = BN / TN;                       // invocations along N
const uint BQ = BKB / 4u;                      // vec4s of x per column and chunk
const uint PF = (BN * BQ + WG - 1u) / WG;      // vec4s of x each invocation prefetches

shared uvec4 shA[BM * ASTRIDE]; // f32 bits, or packed f16 pairs when A16
shared uvec4 shB[BN * BSTRIDE]; // the same for activations with B16

float acc[TM * TN];
vec4 pf[PF]; // the next chunk of x, in flight during the current one

// loadA dequantizes the K tile starting at k0 of rows m0.. into shA.
void loadA(uint m0, uint k0) {
    const uint ppr = BK / 16u; // pieces per tile row
    // A constant trip count, so that the compiler may unroll the loop and
    // have every piece's loads in flight at once.
    for (uint ia = 0u; ia < (BM * ppr + WG - 1u) / WG; ia++) {
        uint it = gl_LocalInvocationID.x + ia * WG;
        if (it >= BM * ppr) {
            continue; // only in the last round, when WG does not divide BM * ppr
        }
        uint r = it / ppr, pp = it % ppr;
        uint tb = pp / QPIECES, p = pp % QPIECES; // block within the tile, piece within the block
        uint kb = k0 + tb * QK;                   // first value of the block
        vec4 v[4] = vec4[4](vec4(0.0), vec4(0.0), vec4(0.0), vec4(0.0));
        if (m0 + r < pc.M && kb < pc.K) {
            dq_piece(WROW(m0 + r) * pc.rowBytes + (kb / QK) * QBYTES, p, pc.K - kb, v);
        }
        for (uint i = 0u; i < 4u; i++) {
            uint c = tb * QK + dq_off(p, i); // column in the tile, a multiple of 4
            if (A16) {
                uvec2 h = uvec2(packHalf2x16(v[i].xy), packHalf2x16(v[i].zw));
                uint o = r * ASTRIDE + c / 8u;
                if ((c & 4u) == 0u) {
                    shA[o].xy = h;
                } else {
                    shA[o].zw = h;
                }
            } else {
                shA[r * ASTRIDE + c / 4u] = floatBitsToUint(v[i]);
            }
        }
    }
}

// fetchB loads x[n0.., k..k+BKB) into pf, zero past N and K.
void fetchB(uint n0, uint k) {
    [[unroll]] for (uint i = 0u; i < PF; i++) {
        uint it = gl_LocalInvocationID.x + i * WG;
        uint n = it / BQ, c = it % BQ;
        vec4 v = vec4(0.0);
        if (it < BN * BQ && COL_OK(n0 + n) && k + 4u * c < pc.K) {
            v = x4[(XROW(n0 + n) * pc.K + k) / 4u + c];
        }
        pf[i] = v;
    }
}

// storeB writes pf into shB.
void storeB() {
    [[unroll]] for (uint i = 0u; i < PF; i++) {
        uint it = gl_LocalInvocationID.x + i * WG;
        if (it < BN * BQ) {
            uint n = it / BQ, c = it % BQ;
            if (B16) {
                uvec2 h = uvec2(packHalf2x16(pf[i].xy), packHalf2x16(pf[i].zw));
                uint o = n * BSTRIDE + c / 2u;
                if ((c & 1u) == 0u) {
                    shB[o].xy = h;
                } else {
                    shB[o].zw = h;
                }
            } else {
                shB[n * BSTRIDE + c] = floatBitsToUint(pf[i]);
            }
        }
    }
}

// Steps of 8 values of k per chunk. A big micro-tile keeps the loop over
// them rolled: its body is already 8 TM TN multiply-adds, and unrolling
// would only multiply the code (and the compile time of software drivers).
// A small one unrolls it, so loads of one step overlap the FMAs of another.
const uint KSTEPS = BKB / 8u;
const uint KU = TM * TN >= 32u ? 1u : KSTEPS;

// multiply accumulates the chunk of shB against columns kc.. of shA.
void multiply(uint tm, uint tn, uint kc) {
    [[dont_unroll]] for (uint ko = 0u; ko < KSTEPS; ko += KU) {
        [[unroll]] for (uint ku = 0u; ku < KU; ku++) {
            uint kk = 8u * (ko + ku);
            // Eight values of k per step: 16-byte reads, AW per weight row
            // and BW per activation column.
            uvec4 a[TM * AW], b[TN * BW];
            [[unroll]] for (uint i = 0u; i < TM; i++) {
                uint o = (tm + i * MT) * ASTRIDE + (kc + kk) / 8u * AW;
                [[unroll]] for (uint w = 0u; w < AW; w++) {
                    a[i * AW + w] = shA[o + w];
                }
            }
            [[unroll]] for (uint j = 0u; j < TN; j++) {
                uint o = (tn + j * NT) * BSTRIDE + kk / 8u * BW;
                [[unroll]] for (uint w = 0u; w < BW; w++) {
                    b[j * BW + w] = shB[o + w];
                }
            }
            // Two values of k at a time, each converted once: TM + TN pairs
            // feed 2 TM TN multiply-adds.
            [[unroll]] for (uint p = 0u; p < 4u; p++) {
                vec2 av[TM], bv[TN];
                [[unroll]] for (uint i = 0u; i < TM; i++) {
                    uvec4 h = a[i * AW + (p >> 1) * (AW - 1u)];
                    av[i] = A16 ? unpackHalf2x16(h[p]) : uintBitsToFloat((p & 1u) == 0u ? h.xy : h.zw);
                }
                [[unroll]] for (uint j = 0u; j < TN; j++) {
                    uvec4 h = b[j * BW + (p >> 1) * (BW - 1u)];
                    bv[j] = B16 ? unpackHalf2x16(h[p]) : uintBitsToFloat((p & 1u) == 0u ? h.xy : h.zw);
                }
                [[unroll]] for (uint i = 0u; i < TM; i++) {
                    [[unroll]] for (uint j = 0u; j < TN; j++) {
                        // a * b + acc contracts to one FMA.
                        acc[i * TN + j] += av[i].x * bv[j].x;
                        acc[i * TN + j] += av[i].y * bv[j].y;
                    }
                }
            }
        }
    }
}

void main() {
    uint m0, n0;
    if (!tile_origin(m0, n0)) {
        return; // whole workgroup: barriers below stay uniform
    }
    uint tm = gl_LocalInvocationID.x % MT, tn = gl_LocalInvocationID.x / MT;
    [[unroll]] for (uint i = 0u; i < TM * TN; i++) {
        acc[i] = 0.0;
    }
    fetchB(n0, 0u);
    for (uint k0 = 0u; k0 < pc.K; k0 += BK) {
        barrier(); // the previous tile's readers of shA and shB are done
        loadA(m0, k0);
        for (uint kc = 0u; kc < BK && k0 + kc < pc.K; kc += BKB) {
            if (kc > 0u) {
                barrier(); // the previous chunk's readers of shB are done
            }
            storeB();
            barrier(); // shA and shB written
            fetchB(n0, k0 + kc + BKB);
            multiply(tm, tn, kc);
        }
    }
    [[unroll]] for (uint i = 0u; i < TM; i++) {
        [[unroll]] for (uint j = 0u; j < TN; j++) {
            uint m = m0 + tm + i * MT, n = n0 + tn + j * NT;
            if (m < pc.M && COL_OK(n)) {
                dst[DROW(n) * pc.M + m] = acc[i * TN + j];
            }
        }
    }
}
