// matmul_coopmat_i8.glsl: the stages and the product of matmul_coopmat's
// integer variant (COOP_INT8; matmul_coopmat.glsl says what it computes).
// Included by matmul_coopmat.glsl after its constants and the accumulators.
//
// Shared memory, all of it in 16-byte units (a cooperative-matrix load
// needs a 16-byte aligned address):
//   shA   BM rows of EXP*BK weight quants (bytes), padded by 16 bytes
//   shB   BN columns of KC activation quants (bytes), padded by 16 bytes
//   shAS  the weight scale of each run: [run][row]
//   shAC  Q4_K/Q5_K: the weight min of each 32 values: [block][row]
//   shBS  the activation scale of each 32 values: [block][column]
//   shBC  Q4_K/Q5_K: that scale times the block's sum of quants
// Rows and columns are the fastest index of the scale arrays, so that the
// CM_M (CM_N) values of a fragment's rows (columns) lie together for the
// stride-0 loads; BM and BN are multiples of 16.
//
// Rows and columns go through matmul_cols.glsl's maps (WROW, XROW, COL_OK)
// like the f16 variant's, but no gathered (MOE_ID) build of the variant
// exists: the products of a mixture-of-experts prefill keep f16.

#ifdef MOE_ID
#error "matmul_coopmat's integer variant has no gathered (MOE_ID) build"
#endif

const bool KMIN = QTYPE == T_Q4_K || QTYPE == T_Q5_K; // weights a*q + c
const uint RUN = QTYPE == T_Q6_K ? 16u : 32u;         // values per weight scale
const uint EXP = CM_K > RUN ? CM_K / RUN : 1u;        // staged bytes per value
const uint RA = EXP * RUN;                            // staged bytes per run
const uint STEPS = RA / CM_K;                         // products per run
const uint SA = (EXP * BK) / 16u + 1u;                // shA row stride, uvec4s
const uint SB = KC / 16u + 1u;                        // shB row stride, uvec4s
const uint SPS = BK / 32u;                            // 32-value slices per K step
const uint BPC = KC / 32u;                            // activation blocks per chunk

shared uvec4 shA[BM * SA];
shared uvec4 shB[BN * SB];
shared vec4 shAS[BM * (BK / RUN) / 4u];
shared vec4 shAC[KMIN ? BM * SPS / 4u : 1u];
shared vec4 shBS[BN * BPC / 4u];
shared vec4 shBC[KMIN ? BN * BPC / 4u : 1u];

// apos is where value v of a K step lies in a row of shA, in bytes: with
// EXP = 2 the 16-value runs of a 32-value block go to bytes 0..15 and
// 48..63 of its 64, and 16..47 stay zero (zeroA).
uint apos(uint v) {
    if (EXP == 1u) {
        return v;
    }
    return 64u * (v >> 5) + 48u * ((v >> 4) & 1u) + (v & 15u);
}

// zeroA clears shA once: with EXP = 2 loadA writes only the quants' bytes,
// and the products read the zeros between them. (The first K step's
// barrier orders it before loadA.)
void zeroA() {
    if (EXP > 1u) {
        for (uint i = gl_LocalInvocationIndex; i < BM * SA; i += WG) {
            shA[i] = uvec4(0u);
        }
    }
}

// recentre makes the unsigned quants of Q6_K (0..63, weight a*(q - 32))
// and Q4_0 (0..15, d*(q - 8)) the signed bytes q - 32 and q - 8, four at a
// time: with the top bit of every byte set no subtraction borrows across
// bytes, and flipping it back leaves (q - bias) mod 256.
uint recentre(uint w) {
    if (QTYPE == T_Q6_K) {
        return ((w | 0x80808080u) - 0x20202020u) ^ 0x80808080u;
    }
    if (QTYPE == T_Q4_0) {
        return ((w | 0x80808080u) - 0x08080808u) ^ 0x80808080u;
    }
    return w;
}

// loadA decodes values k0..k0+BK of rows m0.. into shA (quants) and shAS,
// shAC (their maps), a 32-value slice of slices.glsl per invocation and
// step. Rows past M and values past K read as zero. A map covers a run
// of several slices' groups: the group that starts the run writes it.
void loadA(uint m0, uint k0) {
    for (uint it = gl_LocalInvocationIndex; it < BM * SPS; it += WG) {
        uint r = it / SPS, v0 = k0 + 32u * (it % SPS);
        uint blk = v0 / QK, s = (v0 % QK) / 32u;
        uint u[8] = uint[8](0u, 0u, 0u, 0u, 0u, 0u, 0u, 0u);
        float a[4] = float[4](0.0, 0.0, 0.0, 0.0), c[4] = float[4](0.0, 0.0, 0.0, 0.0);
        if (m0 + r < pc.M && v0 < pc.K) {
            dq_fields(WROW(m0 + r) * pc.rowBytes + blk * QBYTES, s, u, a, c);
        }
        for (uint g = 0u; g < NG; g++) {
            uint vs = blk * QK + slice_val(s, g) - k0; // the group's first value in the step
            for (uint i = 0u; i < GV; i++) {
                uint p = r * 16u * SA + apos(vs + 4u * i);
                shA[p >> 4][(p >> 2) & 3u] = recentre(u[g * GV + i]);
            }
            if (vs % RUN == 0u) {
                uint o = (vs / RUN) * BM + r;
                shAS[o >> 2][o & 3u] = a[g];
                if (KMIN) {
                    o = (vs / 32u) * BM + r;
                    shAC[o >> 2][o & 3u] = c[g];
                }
            }
        }
    }
}

// The activations are staged a 32-value block at a time: its two words of
// quants and its scale. Where a lane holds at most 4 blocks (BPRE) they
// are fetched a chunk ahead into registers (fetchB) and stored at their
// turn (storeB), as the f16 variant's are.
const uint BPL = (BN * BPC + WG - 1u) / WG;
const bool BPRE = BPL <= 4u;
uvec4 braw[BPRE ? 2u * BPL : 1u];
float bscale[BPRE ? BPL : 1u];

// chunkBlock reads block it of the chunk at k of columns n0..; columns
// past N and values past K read as zero.
void chunkBlock(uint n0, uint k, uint it, out uvec4 w0, out uvec4 w1, out float d) {
    uint n = it / BPC, b = it % BPC;
    w0 = uvec4(0u);
    w1 = uvec4(0u);
    d = 0.0;
    if (it < BN * BPC && COL_OK(n0 + n) && k + 32u * b < pc.K) {
        uint blk = (XROW(n0 + n) * pc.K + k) / 32u + b;
        w0 = xq4[2u * blk];
        w1 = xq4[2u * blk + 1u];
        d = xd[pc.N * pc.K / 4u + blk];
    }
}

void fetchB(uint n0, uint k) {
    if (BPRE) {
        [[unroll]] for (uint j = 0u; j < BPL; j++) {
            chunkBlock(n0, k, gl_LocalInvocationIndex + j * WG, braw[2u * j], braw[2u * j + 1u], bscale[j]);
        }
    }
}

// bsum is the sum of the 16 signed bytes of w: flipped to unsigned
// (b + 128), added in 16-bit halves (at most 8 x 255 each), less 16 x 128.
int bsum(uvec4 w) {
    uvec4 v = w ^ 0x80808080u;
    uvec4 p = (v & 0x00FF00FFu) + ((v >> 8) & 0x00FF00FFu);
    uint t = p.x + p.y + p.z + p.w;
    return int((t & 0xFFFFu) + (t >> 16)) - 2048;
}

// storeB writes chunk k of columns n0.. into shB, shBS and shBC: from the
// registers with BPRE, else loading it now.
void storeB(uint n0, uint k) {
    for (uint j = 0u; j < BPL; j++) {
        uint it = gl_LocalInvocationIndex + j * WG;
        if (it < BN * BPC) {
            uvec4 w0, w1;
            float d;
            if (BPRE) {
                uint jj = min(j, BPL - 1u);
                w0 = braw[2u * jj];
                w1 = braw[2u * jj + 1u];
                d = bscale[jj];
            } else {
                chunkBlock(n0, k, it, w0, w1, d);
            }
            uint n = it / BPC, b = it % BPC;
            shB[n * SB + 2u * b] = w0;
            shB[n * SB + 2u * b + 1u] = w1;
            uint o = b * BN + n;
            shBS[o >> 2][o & 3u] = d;
            if (KMIN) {
                shBC[o >> 2][o & 3u] = d * float(bsum(w0) + bsum(w1));
            }
        }
    }
}

// mulChunk adds the products of chunk kc of the step (shB) with the
// subgroup's rows am.. and columns an.. to acc: per 32-value block, per
// run, one int32 fragment per pair of fragments, scaled into f32.
void mulChunk(uint kc, uint am, uint an) {
    [[unroll]] for (uint b = 0u; b < BPC; b++) {
        CM_DECL_S(xs, FN); // dx of the columns
        CM_DECL_S(xc, FN); // dx * sum qx (Q4_K/Q5_K)
        [[unroll]] for (uint j = 0u; j < FN; j++) {
            CM_LOAD_S4(xs[j], shBS, (b * BN + an + j * CM_N) / 4u);
            if (KMIN) {
                CM_LOAD_S4(xc[j], shBC, (b * BN + an + j * CM_N) / 4u);
            }
        }
        uint v = kc + 32u * b; // the block's first value in the step
        [[unroll]] for (uint t = 0u; t < 32u / RUN; t++) {
            CM_DECL_IA(a, FM * STEPS);
            CM_DECL_IB(q, FN * STEPS);
            [[unroll]] for (uint st = 0u; st < STEPS; st++) {
                [[unroll]] for (uint i = 0u; i < FM; i++) {
                    CM_LOAD_IA16(a[i * STEPS + st], shA, (am + i * CM_M) * SA + (EXP * v + t * RA + st * CM_K) / 16u, SA);
                }
                // The activations of the run: with EXP = 2 the whole block
                // (the zero half of the weights drops the other run).
                uint kb = 32u * b + (EXP == 1u ? t * RUN + st * CM_K : 0u);
                [[unroll]] for (uint j = 0u; j < FN; j++) {
                    CM_LOAD_IBT16(q[j * STEPS + st], shB, (an + j * CM_N) * SB + kb / 16u, SB);
                }
            }
            [[unroll]] for (uint i = 0u; i < FM; i++) {
                CM_DECL_R(ws, 1); // the rows' weight scales of the run
                CM_DECL_R(wc, 1); // ... mins of the block (Q4_K/Q5_K)
                CM_LOAD_R4(ws[0], shAS, ((v / RUN + t) * BM + am + i * CM_M) / 4u);
                if (KMIN) {
                    CM_LOAD_R4(wc[0], shAC, ((v / 32u) * BM + am + i * CM_M) / 4u);
                }
                [[unroll]] for (uint j = 0u; j < FN; j++) {
                    CM_DECL_IC(p, 1);
                    CM_IZERO(p[0]);
                    [[unroll]] for (uint st = 0u; st < STEPS; st++) {
                        CM_IMULADD(p[0], a[i * STEPS + st], q[j * STEPS + st]);
                    }
                    CM_ADD_SCALED(acc[i * FN + j], p[0], ws[0], xs[j]);
                    if (KMIN) {
                        CM_ADD_OUTER(acc[i * FN + j], wc[0], xc[j]);
                    }
                }
            }
        }
    }
}
