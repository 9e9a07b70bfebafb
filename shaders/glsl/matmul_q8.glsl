// matmul_q8: dst[n][m] = sum_k W[m][k] * x[n][k] for prefill, with the
// activations in matvec_q8's 8-bit layout (quantize_q8.comp) and quantized
// weights kept as integers: products are packed 4-way integer dot
// products, as in matvec_q8, where matmul.glsl converts every value to f32.
// Built as matmul_q8.comp, and with MOE_ID as matmul_q8_id.comp, the
// gathered product of a mixture-of-experts prefill (matmul_cols.glsl).
//
// The tiling is matmul.glsl's: a workgroup computes a BM x BN tile of dst,
// each invocation a TM x TN micro-tile (rows strided by BM/TM, columns by
// BN/TN). K advances a block at a time (BK: 256 values for K-quants, 32 for
// Q8_0/Q4_0). Each K tile of W is decoded once into shared memory as bytes
// (slices.glsl), with the affine map (a, c) of every 16 values: a weight is
// a*q + c. x follows in chunks of KC values: bytes, and per 16 values the
// block scale d and the scaled sum d * sum q (the product with c).
// For 16 values of k, a (row, column) pair costs four dot products, one
// conversion and three multiply-adds:
//   sum_k w x = a * d * sum q_w q_x + c * d * sum q_x.
// Shared rows are padded by one 16-byte word against bank conflicts.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_EXT_spirv_intrinsics : require

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64; // (BM/TM) * (BN/TN)
layout(constant_id = 1) const uint QTYPE = 12;
layout(constant_id = 2) const uint BM = 16;
layout(constant_id = 3) const uint BN = 16;
layout(constant_id = 4) const uint TM = 2;
layout(constant_id = 5) const uint TN = 2;
layout(constant_id = 6) const uint KC = 64; // activation chunk: a multiple of 32 values of k

layout(binding = 0) writeonly buffer Dst { float dst[]; };
layout(binding = 1) readonly buffer Wts { uint W[]; };
layout(binding = 1) readonly buffer Wts4 { uvec4 W4[]; };
// x in the q8 layout for N columns of K: bytes, then one f32 scale per 32.
layout(binding = 2) readonly buffer XQ4 { uvec4 xq4[]; };
layout(binding = 2) readonly buffer XD { float xd[]; };

#include "matmul_cols.glsl"
#include "dequant.glsl"
#include "slices.glsl"

#include "dot4.glsl"

const uint BK = QK;                      // values of k per weight tile
const uint CK = KC < BK ? KC : BK;       // values of k per activation chunk
const uint AU = BK / 16u;                // 16-value units per weight row
const uint BU = CK / 16u;                // ... per activation column
const uint MT = BM / TM;                 // invocations along M
const uint NT = BN / TN;                 // invocations along N

shared uvec4 shA[BM * (AU + 1u)];  // quants, one byte each
shared vec2 shAM[BM * AU];         // (a, c) per 16 values
shared uvec4 shB[BN * (BU + 1u)];  // 8-bit activations
shared vec2 shBS[BN * BU];         // (d, d * sum q) per 16 values

float acc[TM * TN];

// loadA decodes the K tile starting at k0 of rows m0.. into shA and shAM;
// rows past M read as zero.
void loadA(uint m0, uint k0) {
    for (uint ia = 0u; ia < (BM * SPB + WG - 1u) / WG; ia++) {
        uint it = gl_LocalInvocationID.x + ia * WG;
        if (it >= BM * SPB) {
            continue;
        }
        uint r = it / SPB, s = it % SPB;
        uint u[8] = uint[8](0u, 0u, 0u, 0u, 0u, 0u, 0u, 0u);
        float a[4] = float[4](0.0, 0.0, 0.0, 0.0), c[4] = float[4](0.0, 0.0, 0.0, 0.0);
        if (m0 + r < pc.M) {
            dq_fields(WROW(m0 + r) * pc.rowBytes + (k0 / QK) * QBYTES, s, u, a, c);
        }
        for (uint g = 0u; g < NG; g++) {
            uint v = slice_val(s, g); // GV words of quants from value v on
            for (uint i = 0u; i < GV; i++) {
                uint w = v / 4u + i; // word within the row
                shA[r * (AU + 1u) + w / 4u][w % 4u] = u[g * GV + i];
            }
            // Q6_K groups are 8 values: the one starting a 16-value unit
            // writes its map (both halves' maps are the same).
            if (v % 16u == 0u) {
                for (uint h = 0u; h < max(GV * 4u / 16u, 1u); h++) {
                    shAM[r * AU + v / 16u + h] = vec2(a[g], c[g]);
                }
            }
        }
    }
}

// loadB stages columns n0.. of x, values k..k+CK, into shB and shBS; columns
// past N read as zero.
void loadB(uint n0, uint k) {
    for (uint ib = 0u; ib < (BN * BU + WG - 1u) / WG; ib++) {
        uint it = gl_LocalInvocationID.x + ib * WG;
        if (it >= BN * BU) {
            continue;
        }
        uint n = it / BU, u = it % BU;
        uvec4 q = uvec4(0u);
        float d = 0.0;
        if (COL_OK(n0 + n)) {
            uint v = XROW(n0 + n) * pc.K + k + 16u * u; // value index in the q8 layout
            q = xq4[v / 16u];
            d = xd[pc.N * pc.K / 4u + v / 32u];
        }
        int sum = sdot4(q.x, 0x01010101u) + sdot4(q.y, 0x01010101u) +
                  sdot4(q.z, 0x01010101u) + sdot4(q.w, 0x01010101u);
        shB[n * (BU + 1u) + u] = q;
        shBS[n * BU + u] = vec2(d, d * float(sum));
    }
}

// multiply accumulates the chunk in shB against units au.. of shA.
void multiply(uint tm, uint tn, uint au) {
    for (uint u = 0u; u < BU; u++) {
        uvec4 a[TM], b[TN];
        vec2 am[TM], bs[TN];
        [[unroll]] for (uint i = 0u; i < TM; i++) {
            uint r = tm + i * MT;
            a[i] = shA[r * (AU + 1u) + au + u];
            am[i] = shAM[r * AU + au + u];
        }
        [[unroll]] for (uint j = 0u; j < TN; j++) {
            uint n = tn + j * NT;
            b[j] = shB[n * (BU + 1u) + u];
            bs[j] = shBS[n * BU + u];
        }
        [[unroll]] for (uint i = 0u; i < TM; i++) {
            [[unroll]] for (uint j = 0u; j < TN; j++) {
                int p = sdot4(a[i].x, b[j].x) + sdot4(a[i].y, b[j].y) +
                        sdot4(a[i].z, b[j].z) + sdot4(a[i].w, b[j].w);
                acc[i * TN + j] += am[i].x * (bs[j].x * float(p)) + am[i].y * bs[j].y;
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
    for (uint k0 = 0u; k0 < pc.K; k0 += BK) {
        barrier(); // the previous tile's readers of shA are done
        loadA(m0, k0);
        for (uint kc = 0u; kc < BK; kc += CK) {
            if (kc > 0u) {
                barrier(); // the previous chunk's readers of shB are done
            }
            loadB(n0, k0 + kc);
            barrier(); // shA and shB written
            multiply(tm, tn, kc / 16u);
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
