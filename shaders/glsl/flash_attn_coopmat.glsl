// flash_attn_coopmat: flash attention for prefill on the matrix units
// (coopmat.glsl): S = Q·Kᵀ and O += P·V as f16 fragment products with f32
// accumulation; the online softmax (running max m, sum l) stays in f32.
// flash_attn.comp, the scalar kernel, remains for decode and for devices
// without cooperative matrices.
//
// Bindings, push constants, the step buffer, positions, causality, the
// sliding window, the ring of cache rows and the mask are flash_attn.glsl's,
// as in flash_attn.comp: row i of the batch is at p = pos+i and sees keys
// first_key(p)..p, a workgroup walking from its first row's first key; an
// optional additive f16 mask [n_q][ctx]; tiles where every entry is masked
// are skipped.
//
// A workgroup owns ROWS = BR×HG query rows (BR consecutive positions of HG
// q-heads sharing one KV head; ROWS a multiple of CM_M) and runs W = NSG
// subgroups of SG invocations. Per tile of BC keys:
//   1. the mask tile (MASK) goes to shared memory as f32 log2 units; when
//      no entry is live the tile is skipped (uniformly: a flag in shared);
//   2. the K tile is staged as f16 [key][D+8] (keys past the range as 0),
//      a 16-byte store per 8 values;
//   3. S = Q·Kᵀ: the ROWS x BC score fragments are spread over the
//      subgroups, each summing D/CM_K products of a Q fragment and a K
//      fragment, and stored as f32 [row][BC+4] to shS. Q is
//      pre-scaled by scale·log2e and rounded to f16 once. With QREG (head
//      dims up to 128) a subgroup always takes the same block of CM_M rows
//      (NSG is a multiple of ROWS/CM_M) and keeps that block's D/CM_K Q
//      fragments in registers for the whole walk; wider heads read them
//      from shQ (in registers they would spill on RDNA3);
//   4. the lanes own rows: LPR = W/ROWS lanes per row, each a strided
//      share of its column pairs (j*LPR + sub). They read their scores
//      once, a pair at a time, mask them and keep them in registers,
//      reduce the row max through shared memory (no subgroup operations:
//      the emulation's virtual subgroups need not match the hardware's),
//      and meanwhile the V tile replaces K in shKV;
//   5. P = exp2(S - m) rounded to f16 into shP, a pair a store (the row
//      sum l adds the rounded weights, so that O/l weighs with exactly
//      what P·V used); m is a reference max that moves only when a score
//      passes it by more than RESCALE, so P stays below 2^RESCALE;
//   6. O += P·V: the ROWS x D output fragments are spread over the
//      subgroups, each keeping the same ones for the whole walk as f32
//      accumulators. In a tile where some row's reference moved, each is
//      first scaled row by row by alpha = exp2(m_old - m_new), an
//      accumulator-shaped fragment constant along its rows (coopmat.glsl's
//      R, from shA4), which is rare once the walk is past its first
//      tiles. Where a subgroup's output fragments are all in one block of
//      rows (PHOIST), it loads that block's P fragments once for all of
//      them. No tile stores P·V to shared memory for the lanes to fold
//      in: after the walk the fragments pass once through shS, BC head
//      dims at a time, and the lanes divide by l and write.
// The tiles, the scores and P move through shared memory in 8- and
// 16-byte words: the kernel is bound by its instructions more than by the
// matrix units (docs/KERNELS.md).
// Barriers (barrier(), in uniform control flow: lavapipe treats subgroup
// barriers as workgroup ones) separate the phases; five per tile.
//
// Shared memory (halves for f16): shQ ROWS(D+8) without QREG, shKV
// KVR(D+8) (at least a round of Q's rows with QREG), shP
// ROWS(BC+8), shS ROWS(BC+4) floats, mtile BR(BC+1) floats with MASK
// (rounded up to 4), W floats of row partials, ROWS floats of alpha and
// two 16-byte flags.
// Row strides and every variable's size are multiples of 16 bytes, as the
// cooperative-matrix loads and stores want (below).
//
// The emulated build (COOPMAT_EMULATE) runs the same code with virtual
// subgroups of SG invocations (coopmat.glsl), whatever the hardware's are.

#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "flash_attn.glsl"

// Fragment shape: the device's (coopmat.Choice), passed after
// flash_attn.glsl's constants 0..10. D, BC and ROWS are multiples of it.
layout(constant_id = 11) const uint CM_M = 16;
layout(constant_id = 12) const uint CM_N = 16;
layout(constant_id = 13) const uint CM_K = 16;
const uint SGV = SG; // the emulation's virtual subgroup size
#include "coopmat.glsl"

const uint NSG = W / SG;                 // subgroups
const uint ROWS = BR * HG;               // query rows
const uint LPR = W / ROWS;               // lanes per row
const uint PPR = BC / 2u;                // column pairs of a tile row
const uint NPL = (PPR + LPR - 1u) / LPR; // pairs per lane: j*LPR + sub
const uint DP = D + 8u;                  // shKV row stride (halves)
const bool QREG = D <= 128u;             // Q fragments in registers
// With QREG, Q passes through shKV before the walk, QRR rows a round
// (whole row blocks, at least one): shKV keeps a tile's rows, so that a
// tile of many rows and few keys (8 q-heads x 32 keys) fits.
// (Ternaries, not min and max: these are specialization constant
// expressions.)
const uint QRB = BC >= CM_M ? CM_M * (BC / CM_M) : CM_M;
const uint QRR = QRB < ROWS ? QRB : ROWS;
const uint KVR = QREG && QRR > BC ? QRR : BC; // rows of shKV
const uint PP = BC + 8u;                 // shP row stride (halves)
const uint SSR = BC + 4u;                // shS row stride (floats): S, or BC dims of O
const uint MS = BC + 1u;                 // mtile row stride (floats)
const uint FM = ROWS / CM_M;             // fragments along the rows
const uint FS = FM * (BC / CM_N);        // score fragments
const uint FO = FM * (D / CM_N);         // output fragments
const uint FOS = (FO + NSG - 1u) / NSG;  // output fragments a subgroup keeps
const bool PHOIST = NSG % FM == 0u;      // a subgroup's outputs in one row block
// A row's reference max moves only when a score passes it by more than
// RESCALE (log2 units): P stays below 2^RESCALE in f16, and O's fragments
// are rescaled only in the tiles where some row's reference moved.
const float RESCALE = 8.0;

// The cooperative-matrix loads and stores need 16-byte aligned pointers
// (Vulkan's rule for OpCooperativeMatrixLoadKHR/StoreKHR), but a shared
// f16 array is only promised 2-byte alignment, and drivers place shared
// variables one after another at their natural alignment. So every shared
// variable here is a whole number of 16-byte units: with a 4-byte `mlive`
// and a 1-float unmasked `mtile`, the H200's driver placed the fragment
// arrays 4 bytes off and its fragment loads read wrong addresses
// (docs/KERNELS.md).
shared float16_t shQ[QREG ? 8u : ROWS * DP];
#ifdef COOPMAT_EMULATE
shared float16_t shKV[KVR * DP];

// kv_put8 stores the 8 halves of w (the first in the low half of w.x) at
// half o of shKV (a multiple of 8).
void kv_put8(uint o, uvec4 w) {
    [[unroll]] for (uint i = 0u; i < 4u; i++) {
        const f16vec2 h = unpackFloat2x16(w[i]);
        shKV[o + 2u * i] = h.x;
        shKV[o + 2u * i + 1u] = h.y;
    }
}
#define KV_LOAD_A(a, off, stride) CM_LOAD_A(a, shKV, off, stride)
#define KV_LOAD_BT(b, off, stride) CM_LOAD_BT(b, shKV, off, stride)
#define KV_LOAD_B(b, off, stride) CM_LOAD_B(b, shKV, off, stride)
#else
// On the matrix units shKV is an array of 16-byte words, so that the
// tiles go in with one 16-byte store per 8 values, not eight 2-byte ones;
// the fragment loads count offsets and strides in words (DP and every
// offset below are multiples of 8 halves).
shared uvec4 shKV[KVR * DP / 8u];

void kv_put8(uint o, uvec4 w) { shKV[o / 8u] = w; }
#define KV_LOAD_A(a, off, stride) coopMatLoad(a, shKV, (off) / 8u, (stride) / 8u, gl_CooperativeMatrixLayoutRowMajor)
#define KV_LOAD_BT(b, off, stride) coopMatLoad(b, shKV, (off) / 8u, (stride) / 8u, gl_CooperativeMatrixLayoutColumnMajor)
#define KV_LOAD_B(b, off, stride) coopMatLoad(b, shKV, (off) / 8u, (stride) / 8u, gl_CooperativeMatrixLayoutRowMajor)
#endif
// shP holds f16 pairs, shS float pairs: the lanes read and write a pair
// of columns at once.
shared uint shP[ROWS * PP / 2u];
shared vec2 shS[ROWS * SSR / 2u];
#ifdef COOPMAT_EMULATE
// S_STORE: shS[off + m*stride + n] = c[m][n]; P_LOAD_A: a[m][k] = the
// half off + m*stride + k of shP (places in floats and halves).
#define S_STORE(c, off, stride)                                 \
    for (uint cm_e = gl_LocalInvocationIndex % SGV; cm_e < CM_M * CM_N; cm_e += SGV) { \
        uint cm_i = (off) + (cm_e / CM_N) * (stride) + cm_e % CM_N; \
        shS[cm_i >> 1][cm_i & 1u] = (c)[cm_e];                  \
    }
#define P_LOAD_A(a, off, stride)                                \
    for (uint cm_e = 0u; cm_e < CM_M * CM_K; cm_e++) {          \
        uint cm_h = (off) + (cm_e / CM_K) * (stride) + cm_e % CM_K; \
        (a)[cm_e] = float16_t(unpackHalf2x16(shP[cm_h >> 1])[cm_h & 1u]); \
    }
#else
#define S_STORE(c, off, stride) coopMatStore(c, shS, (off) / 2u, (stride) / 2u, gl_CooperativeMatrixLayoutRowMajor)
#define P_LOAD_A(a, off, stride) coopMatLoad(a, shP, (off) / 2u, (stride) / 2u, gl_CooperativeMatrixLayoutRowMajor)
#endif
shared float mtile[MASK ? (BR * MS + 3u) & ~3u : 4u];
shared float redm[W];
shared vec4 shA4[ROWS / 4u]; // each row's alpha, for the row fragments of O's rescale
shared uvec4 mlive4; // .x: the last tile with a live mask entry
#define mlive mlive4.x
shared uvec4 moved4; // .x: the last tile where a row's reference max moved
#define moved moved4.x

// The next tile's K and V wait in registers (KVN 16-byte words a lane of
// each): fetch issues their loads while the current tile's softmax and
// P·V run, and put stores them into shKV at their phase, so no phase
// waits on a global load. Keys from ke on are zero (NaN rows of a cache
// must not reach P·V, where 0·NaN would spread).
const uint KVU = D / 8u;                    // 16-byte words a key row
const uint KVN = (BC * KVU + W - 1u) / W;   // words a lane fetches
uvec4 kreg[KVN];
uvec4 vreg[KVN];

void fetch(uint lane, uint t, uint ke, uint kv_stride, uint kv_off) {
    [[unroll]] for (uint j = 0u; j < KVN; j++) {
        const uint it = lane + j * W;
        const uint c = it / KVU, u = it % KVU;
        uvec4 kw = uvec4(0u), vw = uvec4(0u);
        if (it < BC * KVU && t + c < ke) {
            const uint e = ring_row(t + c) * kv_stride + kv_off + 8u * u;
            kw = k4[e / 8u];
            vw = v4[e / 8u];
        }
        kreg[j] = kw;
        vreg[j] = vw;
    }
}

void put(bool v, uint lane) {
    [[unroll]] for (uint j = 0u; j < KVN; j++) {
        const uint it = lane + j * W;
        if (it < BC * KVU) {
            kv_put8((it / KVU) * DP + 8u * (it % KVU), v ? vreg[j] : kreg[j]);
        }
    }
}

// masked is the pair of scores s of columns c, c+1 of tile t in row qi of
// the query block, past the mask (MASK: mtile's log2 units added, NEG
// where masked) or the causal range and the window.
vec2 masked(vec2 s, uint t, uint c, uint qi, uint ke, uint last_key, uint first) {
    vec2 r;
    [[unroll]] for (uint i = 0u; i < 2u; i++) {
        if (MASK) {
            const float mv = mtile[qi * MS + c + i];
            r[i] = mv > NEG_HALF ? s[i] + mv : NEG;
        } else {
            const uint key = t + c + i;
            r[i] = (key < ke && key <= last_key && key >= first) ? s[i] : NEG;
        }
    }
    return r;
}

void main() {
    const uint lane = gl_LocalInvocationIndex;
    const uint sg = CM_SUBGROUP;
    const uint row = lane / LPR;      // the row this lane works on
    const uint sub = lane % LPR;      // its place among the row's lanes
    const uint qi = row % BR;
    const uint hl = row / BR;

    const uint group = pc.n_head / pc.n_kv_head;
    const uint hgroups = group / HG;
    const uint kvh = gl_WorkGroupID.y / hgroups;
    const uint head0 = kvh * group + (gl_WorkGroupID.y % hgroups) * HG;
    const uint q0 = gl_WorkGroupID.x * BR;
    const uint qn = min(BR, pc.n_q - q0);
    const uint qrow = q0 + min(qi, qn - 1u);

    const uint pos = step_pos;
    const uint last_key = pos + qrow;
    const uint kv_stride = pc.n_kv_head * D;
    const uint kv_off = (step_seq * pc.ctx) * kv_stride + kvh * D;
    const uint first = first_key(pos, pc.n_q, last_key);
    const uvec2 keys = key_range(pos, pc.n_q, pos + q0, pos + q0 + qn);
    const uint kb = keys.x;
    const uint ke = keys.y;
    ring_init(kb);

    // Q rows, scaled into log2 units and rounded to f16; rows past the
    // batch are zero (they write nothing).
    const float qscale = pc.scale * LOG2E;
    CM_DECL_A(qa, QREG ? D / CM_K : 1u);
    if (QREG) {
        // QRR rows a round, 8 values at a time, one store each; then the
        // subgroups whose row block is in the round load its fragments.
        const uint qmi = sg % FM; // the subgroup's row block, every tile
        for (uint r0 = 0u; r0 < ROWS; r0 += QRR) {
            barrier(); // the previous round's fragments are loaded
            for (uint e = lane; e < QRR * D / 8u; e += W) {
                const uint r = r0 + e / (D / 8u), d = 8u * (e % (D / 8u));
                uvec4 w = uvec4(0u);
                if (r < ROWS && r % BR < qn) {
                    const uint at = (q0 + r % BR) * pc.n_head * D + (head0 + r / BR) * D + d;
                    [[unroll]] for (uint i = 0u; i < 4u; i++) {
                        w[i] = packFloat2x16(f16vec2(q_in[at + 2u * i] * qscale, q_in[at + 2u * i + 1u] * qscale));
                    }
                }
                kv_put8((r - r0) * DP + d, w);
            }
            barrier(); // the round is staged
            if (qmi * CM_M >= r0 && qmi * CM_M < r0 + QRR) { // uniform in the subgroup
                for (uint j = 0u; j < D / CM_K; j++) {
                    KV_LOAD_A(qa[j], (qmi * CM_M - r0) * DP + j * CM_K, DP);
                }
            }
        }
    } else {
        for (uint e = lane; e < ROWS * D; e += W) {
            const uint r = e / D, d = e % D;
            float x = 0.0;
            if (r % BR < qn) {
                x = q_in[(q0 + r % BR) * pc.n_head * D + (head0 + r / BR) * D + d] * qscale;
            }
            shQ[r * DP + d] = float16_t(x);
        }
    }
    if (lane == 0u) {
        mlive = 0u;
        moved = 0u;
    }

    // O = P·V accumulates in fragments: subgroup sg keeps output fragments
    // sg, sg+NSG, ... (a spare subgroup repeats the last, never stored).
    CM_DECL_C(oacc, FOS);
    CM_UNROLL for (uint k = 0u; k < FOS; k++) {
        CM_ZERO(oacc[k]);
    }
    float m = NEG;  // the row's reference max
    float l = 0.0;  // the lane's share of the row's sum

    uint tile = 0u;
    fetch(lane, kb, ke, kv_stride, kv_off);
    for (uint t = kb; t < ke; t += BC) {
        tile++;
        barrier(); // the previous tile's readers of shared memory (and Q's) are done
        if (MASK) {
            bool live = false;
            for (uint e = lane; e < BR * BC; e += W) {
                const uint i = e / BC, c = e % BC;
                const uint key = t + c, qq = q0 + i;
                float mv = NEG;
                if (i < qn && key < ke && key <= pos + qq && key >= first_key(pos, pc.n_q, pos + qq)) {
                    mv = mask_log2(qq * pc.ctx + ring_row(key));
                }
                mtile[i * MS + c] = mv;
                live = live || mv > NEG_HALF;
            }
            if (live) {
                mlive = tile; // every writer writes the same value
            }
            barrier();
            if (mlive != tile) {
                fetch(lane, t + BC, ke, kv_stride, kv_off);
                continue; // uniform: every lane read the same flag
            }
        }

        put(false, lane);
        barrier(); // the K tile is written

        // S = Q·Kᵀ into shS: [row][key].
        // Trip counts uniform across the workgroup: the fragment operations
        // stay out of loops whose bounds depend on the subgroup.
        for (uint f0 = 0u; f0 < FS; f0 += NSG) {
            const uint f = min(f0 + sg, FS - 1u); // a spare subgroup redoes the last fragment
            const bool own = f0 + sg < FS;
            const uint mi = f % FM, nj = f / FM;
            CM_DECL_C(acc, 1);
            CM_ZERO(acc[0]);
            for (uint j = 0u; j < D / CM_K; j++) {
                CM_DECL_B(b, 1);
                KV_LOAD_BT(b[0], nj * CM_N * DP + j * CM_K, DP);
                if (QREG) {
                    CM_MULADD(acc[0], qa[j], b[0]);
                } else {
                    CM_DECL_A(a, 1);
                    CM_LOAD_A(a[0], shQ, mi * CM_M * DP + j * CM_K, DP);
                    CM_MULADD(acc[0], a[0], b[0]);
                }
            }
            if (own) {
                S_STORE(acc[0], mi * CM_M * SSR + nj * CM_N, SSR);
            }
        }
        barrier(); // the scores are written; K is no longer read

        // The lane's partial row max of its masked scores; V replaces K.
        float pmax = NEG;
        vec2 sv[NPL];
        [[unroll]] for (uint j = 0u; j < NPL; j++) {
            const uint pr = j * LPR + sub;
            sv[j] = vec2(NEG);
            if (pr < PPR) {
                sv[j] = masked(shS[(row * SSR) / 2u + pr], t, 2u * pr, qi, ke, last_key, first);
                pmax = max(pmax, max(sv[j].x, sv[j].y));
            }
        }
        redm[lane] = pmax;
        put(true, lane);
        fetch(lane, t + BC, ke, kv_stride, kv_off);
        barrier(); // the partial maxima and the V tile are written

        // The row's new max, and the lane's weights into shP.
        float tmax = NEG;
        for (uint i = 0u; i < LPR; i++) {
            tmax = max(tmax, redm[row * LPR + i]);
        }
        const bool moves = tmax > m + RESCALE;
        const float m_new = moves ? tmax : m;
        // While every score so far is masked, m_new is NEG; subtracting 0
        // instead keeps every weight exp2(NEG) = 0 rather than exp2(0) = 1.
        const float m_use = m_new > NEG_HALF ? m_new : 0.0;
        const float alpha = moves ? exp2(m - m_use) : 1.0;
        m = m_new;
        float psum = 0.0;
        [[unroll]] for (uint j = 0u; j < NPL; j++) {
            const uint pr = j * LPR + sub;
            if (pr < PPR) {
                const f16vec2 p = f16vec2(exp2(sv[j] - m_use));
                shP[(row * PP) / 2u + pr] = packFloat2x16(p);
                psum += float(p.x) + float(p.y);
            }
        }
        l = l * alpha + psum;
        if (sub == 0u) {
            shA4[row / 4u][row % 4u] = alpha;
        }
        if (moves) {
            moved = tile; // every writer writes the same value
        }
        barrier(); // P, alpha and the flag are written; the scores are no longer read

        // O = O·alpha + P·V, fragment by fragment; the rescale only where
        // some row's reference moved (uniform: one flag read by all).
        const bool rescale = moved == tile;
        // Where every output fragment of a subgroup is in one block of rows
        // (NSG a multiple of FM), its P fragments are loaded once for all.
        CM_DECL_A(pa, PHOIST ? BC / CM_K : 1u);
        if (PHOIST) {
            CM_UNROLL for (uint kk = 0u; kk < BC / CM_K; kk++) {
                P_LOAD_A(pa[kk], (sg % FM) * CM_M * PP + kk * CM_K, PP);
            }
        }
        CM_UNROLL for (uint k = 0u; k < FOS; k++) {
            const uint f = min(k * NSG + sg, FO - 1u);
            const uint mi = f % FM, dj = f / FM;
            if (rescale) {
                CM_DECL_R(ra, 1);
                CM_LOAD_R4(ra[0], shA4, mi * CM_M / 4u);
                CM_MUL_R(oacc[k], ra[0]);
            }
            for (uint kk = 0u; kk < BC / CM_K; kk++) {
                CM_DECL_B(b, 1);
                KV_LOAD_B(b[0], kk * CM_K * DP + dj * CM_N, DP);
                if (PHOIST) {
                    CM_MULADD(oacc[k], pa[kk], b[0]);
                } else {
                    CM_DECL_A(a, 1);
                    P_LOAD_A(a[0], mi * CM_M * PP + kk * CM_K, PP);
                    CM_MULADD(oacc[k], a[0], b[0]);
                }
            }
        }
    }

    // The row's sum from its lanes' shares, then O through shS ([row][dim])
    // in chunks of BC dims, the scores' rows' width.
    barrier(); // the last tile's readers of shS and redm are done
    redm[lane] = l;
    barrier();
    float tl = 0.0;
    for (uint i = 0u; i < LPR; i++) {
        tl += redm[row * LPR + i];
    }
    const float fl = tl > 0.0 ? 1.0 / tl : 0.0; // a fully masked row outputs 0
    const uint obase = (qrow * pc.n_head + head0 + hl) * D;
    for (uint c0 = 0u; c0 < D; c0 += BC) {
        CM_UNROLL for (uint k = 0u; k < FOS; k++) {
            const uint f = k * NSG + sg;
            const uint dc = (f / FM) * CM_N;
            if (f < FO && dc >= c0 && dc < c0 + BC) {
                S_STORE(oacc[k], (f % FM) * CM_M * SSR + dc - c0, SSR);
            }
        }
        barrier(); // the chunk is written
        if (qi < qn) {
            for (uint d = c0 + sub; d < min(c0 + BC, D); d += LPR) {
                const uint at = row * SSR + d - c0;
                o_out[obase + d] = shS[at >> 1][at & 1u] * fl;
            }
        }
        barrier(); // the chunk is read
    }
}
