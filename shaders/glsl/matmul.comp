#version 450
// matmul: dst[n][m] = sum_k W[m][k] * x[n][k] for prefill (many columns).
//
// A workgroup computes a BM x BN tile of dst (BM rows of W, BN columns of x);
// each invocation a TM x TN micro-tile, rows strided by BM/TM and columns by
// BN/TN so neighbouring invocations read neighbouring shared rows.
// K advances in tiles of BK values: whole superblocks for K-quants (256),
// whole blocks for Q8_0/Q4_0 (32), 64 for float types. Each K tile of W is
// dequantized once into shared memory (f32, or f16 pairs when A16 so that
// BM = 32 fits 32 KiB); x follows in chunks of BKB values. Shared rows are
// padded against bank conflicts (see ASTRIDE).
#extension GL_GOOGLE_include_directive : require

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64; // (BM/TM) * (BN/TN)
layout(constant_id = 1) const uint QTYPE = 12;
layout(constant_id = 2) const uint BM = 16;
layout(constant_id = 3) const uint BN = 16;
layout(constant_id = 4) const uint TM = 2;
layout(constant_id = 5) const uint TN = 2;
layout(constant_id = 6) const bool A16 = false;

layout(binding = 0) writeonly buffer Dst { float dst[]; };
layout(binding = 1) readonly buffer Wts { uint W[]; };
layout(binding = 2) readonly buffer X { vec4 x4[]; };

layout(push_constant) uniform Push {
    uint M;        // rows of W
    uint N;        // columns (tokens)
    uint K;        // values per row
    uint rowBytes; // bytes per row of W
} pc;

#include "dequant.glsl"

const uint BK = QFLOAT ? 64u : QK;
const uint BKB = 32u;
// Shared tiles are read 4 (f32) or 8 (f16) values at a time as 16-byte
// words. Rows are padded by one such word: a row stride of 4 mod 32 banks
// lets the 8 invocations of one 16-byte access phase read 8 different rows
// from 32 distinct banks.
const uint ASTRIDE = (A16 ? BK / 8u : BK / 4u) + 1u; // uvec4s per weight row
const uint BSTRIDE = BKB / 4u + 1u;                   // vec4s per activation row
const uint MT = BM / TM; // invocations along M
const uint NT = BN / TN; // invocations along N

shared uvec4 shA[BM * ASTRIDE]; // f32 bits, or packed f16 pairs when A16
shared vec4 shB[BN * BSTRIDE];

float acc[TM * TN];

// loadA dequantizes the K tile starting at k0 of rows m0.. into shA.
void loadA(uint m0, uint k0) {
    const uint ppr = BK / 16u; // pieces per tile row
    for (uint it = gl_LocalInvocationID.x; it < BM * ppr; it += WG) {
        uint r = it / ppr, pp = it % ppr;
        uint tb = pp / QPIECES, p = pp % QPIECES; // block within the tile, piece within the block
        uint kb = k0 + tb * QK;                   // first value of the block
        vec4 v[4] = vec4[4](vec4(0.0), vec4(0.0), vec4(0.0), vec4(0.0));
        if (m0 + r < pc.M && kb < pc.K) {
            dq_piece((m0 + r) * pc.rowBytes + (kb / QK) * QBYTES, p, pc.K - kb, v);
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

// loadB copies x[n0.., k..k+BKB) into shB, zero past N and K.
void loadB(uint n0, uint k) {
    for (uint it = gl_LocalInvocationID.x; it < BN * (BKB / 4u); it += WG) {
        uint n = it / (BKB / 4u), c = it % (BKB / 4u);
        vec4 v = vec4(0.0);
        if (n0 + n < pc.N && k + 4u * c < pc.K) {
            v = x4[((n0 + n) * pc.K + k) / 4u + c];
        }
        shB[n * BSTRIDE + c] = v;
    }
}

void main() {
    uint m0 = gl_WorkGroupID.x * BM, n0 = gl_WorkGroupID.y * BN;
    uint tm = gl_LocalInvocationID.x % MT, tn = gl_LocalInvocationID.x / MT;
    for (uint i = 0u; i < TM * TN; i++) {
        acc[i] = 0.0;
    }
    for (uint k0 = 0u; k0 < pc.K; k0 += BK) {
        barrier(); // the previous tile's readers are done
        loadA(m0, k0);
        for (uint kc = 0u; kc < BK && k0 + kc < pc.K; kc += BKB) {
            barrier(); // shA written; the previous chunk's readers of shB are done
            loadB(n0, k0 + kc);
            barrier();
            // Eight values of k per step: one 16-byte read of f16 weights,
            // two of f32 weights or activations.
            for (uint kk = 0u; kk < BKB; kk += 8u) {
                vec4 alo[TM], ahi[TM], blo[TN], bhi[TN];
                for (uint i = 0u; i < TM; i++) {
                    uint o = (tm + i * MT) * ASTRIDE;
                    if (A16) {
                        uvec4 h = shA[o + (kc + kk) / 8u];
                        alo[i] = vec4(unpackHalf2x16(h.x), unpackHalf2x16(h.y));
                        ahi[i] = vec4(unpackHalf2x16(h.z), unpackHalf2x16(h.w));
                    } else {
                        alo[i] = uintBitsToFloat(shA[o + (kc + kk) / 4u]);
                        ahi[i] = uintBitsToFloat(shA[o + (kc + kk) / 4u + 1u]);
                    }
                }
                for (uint j = 0u; j < TN; j++) {
                    uint o = (tn + j * NT) * BSTRIDE + kk / 4u;
                    blo[j] = shB[o];
                    bhi[j] = shB[o + 1u];
                }
                for (uint i = 0u; i < TM; i++) {
                    for (uint j = 0u; j < TN; j++) {
                        acc[i * TN + j] += dot(alo[i], blo[j]) + dot(ahi[i], bhi[j]);
                    }
                }
            }
        }
    }
    for (uint i = 0u; i < TM; i++) {
        for (uint j = 0u; j < TN; j++) {
            uint m = m0 + tm + i * MT, n = n0 + tn + j * NT;
            if (m < pc.M && n < pc.N) {
                dst[n * pc.M + m] = acc[i * TN + j];
            }
        }
    }
}
