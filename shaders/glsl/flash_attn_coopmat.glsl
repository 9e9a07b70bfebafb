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
// q-heads sharing one KV head) and runs NSG subgroups of SG invocations.
// Subgroup g owns rows g·CM_M.. (one block of CM_M rows, inside one head)
// from start to end: it keeps the block's Q fragments (pre-scaled by
// scale·log2e, rounded to f16) in registers and its output O as D/CM_N
// accumulator fragments. Per tile of BC keys:
//   1. the workgroup stages the K and V tiles as f16 [key][D+8] (keys past
//      the range as 0), and with MASK the mask tile as f32 log2 units; a
//      tile with no live mask entry is skipped (uniformly: a flag in
//      shared); two barrier()s a tile, the only ones;
//   2. each subgroup computes its scores S = Q·Kᵀ (BC/CM_N fragments) and
//      stores them transposed (f32 [key][row]) to its own region;
//   3. its lanes own its rows (LPR lanes a row, or RPL rows a lane where
//      the subgroup has fewer lanes than rows): they mask the scores, find
//      the row's new max m through the region's partials, and write
//      P = exp2(S - m) rounded to f16, and alpha = exp2(m_old - m);
//   4. the subgroup scales O by alpha row by row (an accumulator-shaped
//      fragment constant along its rows, coopmat.glsl's R) and adds P·V.
// Between the phases of 2-4 a subgroup waits only for itself (CM_SYNC).
// The row sum l stays a partial per lane (it adds the rounded weights, so
// that O/l weighs with exactly what P·V used) until the end, where the
// fragments of O pass through the region to be divided by l and written.
// With SPLIT, workgroup z walks the z-th run of the keys (key_range) and
// writes O and (m, l) unnormalized for flash_attn_reduce to merge.
//
// Shared memory (halves for f16): shKV 2·BC(D+8) (Q passes through it
// first: ROWS <= 2·BC), shQ ROWS(D+8) without QREG, shS NSG·BC(CM_M+4)
// floats, shP NSG·CM_M(BC+8), shR NSG·CM_M floats, red W floats, mtile
// BR(BC+1) floats with MASK (rounded up to 4) and 16 bytes of flag. Row
// strides and every variable's size are multiples of 16 bytes, as the
// cooperative-matrix loads and stores want (below).
//
// The emulated build (COOPMAT_EMULATE) runs the same code with virtual
// subgroups of SG invocations (coopmat.glsl), whatever the hardware's.

#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "flash_attn.glsl"

// Fragment shape: the device's (coopmat.Choice), passed after
// flash_attn.glsl's constants 0..10. D and BC are multiples of it; ROWS is
// NSG·CM_M.
layout(constant_id = 11) const uint CM_M = 16;
layout(constant_id = 12) const uint CM_N = 16;
layout(constant_id = 13) const uint CM_K = 16;
const uint SGV = SG; // the emulation's virtual subgroup size
#include "coopmat.glsl"

const uint NSG = W / SG;                 // subgroups, one row block each
const uint ROWS = BR * HG;               // query rows (NSG·CM_M)
const uint LPR = SG > CM_M ? SG / CM_M : 1u; // lanes a row
const uint RPL = CM_M > SG ? CM_M / SG : 1u; // rows a lane
const uint NSL = BC / LPR;               // a lane's columns of a row
const uint NOL = CM_N / LPR;             // a lane's columns of an output fragment
const uint DP = D + 8u;                  // shKV and shQ row stride (halves)
const uint PP = BC + 8u;                 // shP row stride (halves)
const uint SS = CM_M + 4u;               // shS row stride (floats)
const uint MS = BC + 1u;                 // mtile row stride (floats)
const uint FN = BC / CM_N;               // score fragments a block
const uint FD = D / CM_N;                // output fragments a block
const bool QREG = D <= 128u;             // Q fragments in registers

// The cooperative-matrix loads and stores need 16-byte aligned pointers
// (Vulkan's rule for OpCooperativeMatrixLoadKHR/StoreKHR), but a shared
// f16 array is only promised 2-byte alignment, and drivers place shared
// variables one after another at their natural alignment. So every shared
// variable here is a whole number of 16-byte units: with a 4-byte flag
// and a 1-float unmasked mask tile, the H200's driver placed the fragment
// arrays 4 bytes off and its fragment loads read wrong addresses
// (docs/KERNELS.md).
shared float16_t shKV[2u * BC * DP];
shared float16_t shQ[QREG ? 8u : ROWS * DP];
shared float shS[NSG * BC * SS];
shared float16_t shP[NSG * CM_M * PP];
shared vec4 shR[NSG * CM_M / 4u];
shared float red[W];
shared float mtile[MASK ? (BR * MS + 3u) & ~3u : 4u];
shared uvec4 mlive4; // .x: the last tile with a live mask entry
#define mlive mlive4.x

// The next tile's K and V wait in registers (KVN 16-byte words a lane of
// each): fetch issues their loads while the current tile's products and
// softmax run, and put stores them into shKV, so no phase waits on a
// global load. Keys from ke on are zero (NaN rows of a cache must not
// reach P·V, where 0·NaN would spread).
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

void put_word(uint o, uvec4 w) {
    const f16vec2 h0 = unpackFloat2x16(w.x), h1 = unpackFloat2x16(w.y);
    const f16vec2 h2 = unpackFloat2x16(w.z), h3 = unpackFloat2x16(w.w);
    shKV[o] = h0.x; shKV[o + 1u] = h0.y; shKV[o + 2u] = h1.x; shKV[o + 3u] = h1.y;
    shKV[o + 4u] = h2.x; shKV[o + 5u] = h2.y; shKV[o + 6u] = h3.x; shKV[o + 7u] = h3.y;
}

// put stores the fetched K tile at shKV's key rows 0..BC-1, V at BC..2BC-1.
void put(uint lane) {
    [[unroll]] for (uint j = 0u; j < KVN; j++) {
        const uint it = lane + j * W;
        if (it < BC * KVU) {
            const uint o = (it / KVU) * DP + 8u * (it % KVU);
            put_word(o, kreg[j]);
            put_word(BC * DP + o, vreg[j]);
        }
    }
}

void main() {
    const uint lane = gl_LocalInvocationIndex;
    const uint sg = CM_SUBGROUP;
    const uint sl = CM_LANE;
    const uint sub = sl % LPR;        // the lane's place among its row's lanes
    const uint r0 = sg * CM_M;        // the subgroup's first row

    const uint group = pc.n_head / pc.n_kv_head;
    const uint hgroups = group / HG;
    const uint kvh = gl_WorkGroupID.y / hgroups;
    const uint head0 = kvh * group + (gl_WorkGroupID.y % hgroups) * HG;
    const uint q0 = gl_WorkGroupID.x * BR;
    const uint qn = min(BR, pc.n_q - q0);

    const uint pos = step_pos;
    const uint kv_stride = pc.n_kv_head * D;
    const uint kv_off = (step_seq * pc.ctx) * kv_stride + kvh * D;
    const uvec2 keys = key_range(pos, pc.n_q, pos + q0, pos + q0 + qn);
    const uint kb = keys.x;
    const uint ke = keys.y;
    ring_init(kb);

    // The lane's rows: block row br[i] (in 0..CM_M), the batch row
    // qrow[i] it reads (rows past the batch compute on zero Q as the last
    // one's position and write nothing), its last key and first key.
    uint br[RPL], qi[RPL], last_key[RPL], first[RPL];
    [[unroll]] for (uint i = 0u; i < RPL; i++) {
        br[i] = sl / LPR + i * (SG / LPR);
        qi[i] = (r0 + br[i]) % BR;
        const uint qrow = q0 + min(qi[i], qn - 1u);
        last_key[i] = pos + qrow;
        first[i] = first_key(pos, pc.n_q, last_key[i]);
    }

    // Q rows, scaled into log2 units and rounded to f16; rows past the
    // batch are zero. With QREG they pass through shKV in parts of 2·BC
    // rows, each subgroup taking its block's fragments from its part.
    const float qscale = pc.scale * LOG2E;
    CM_DECL_A(qa, QREG ? D / CM_K : 1u);
    const uint QPART = QREG ? 2u * BC : ROWS;
    for (uint p0 = 0u; p0 < ROWS; p0 += QPART) {
        if (QREG) {
            barrier(); // the previous part's fragments are loaded
        }
        for (uint e = lane; e < QPART * D; e += W) {
            const uint r = p0 + e / D, d = e % D;
            float x = 0.0;
            if (r < ROWS && r % BR < qn) {
                x = q_in[(q0 + r % BR) * pc.n_head * D + (head0 + r / BR) * D + d] * qscale;
            }
            if (QREG) {
                shKV[(e / D) * DP + d] = float16_t(x);
            } else if (r < ROWS) {
                shQ[r * DP + d] = float16_t(x);
            }
        }
        if (QREG) {
            barrier(); // the part is staged
            if (r0 >= p0 && r0 < p0 + QPART) {
                for (uint j = 0u; j < D / CM_K; j++) {
                    CM_LOAD_A(qa[j], shKV, (r0 - p0) * DP + j * CM_K, DP);
                }
            }
        }
    }
    if (lane == 0u) {
        mlive = 0u;
    }

    CM_DECL_C(o, FD);
    [[unroll]] for (uint j = 0u; j < FD; j++) {
        CM_ZERO(o[j]);
    }
    float m[RPL], l[RPL];
    [[unroll]] for (uint i = 0u; i < RPL; i++) {
        m[i] = NEG;
        l[i] = 0.0;
    }
    const uint sbase = sg * BC * SS;  // the subgroup's score region
    const uint pbase = sg * CM_M * PP;

    uint tile = 0u;
    fetch(lane, kb, ke, kv_stride, kv_off);
    for (uint t = kb; t < ke; t += BC) {
        tile++;
        barrier(); // every subgroup is done with the previous tile (and Q)
        put(lane);
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
        }
        barrier(); // the K and V tiles (and the mask tile) are written
        fetch(lane, t + BC, ke, kv_stride, kv_off);
        if (MASK && mlive != tile) {
            continue; // uniform: every lane read the same flag
        }

        // S = Q·Kᵀ for the subgroup's block, transposed into its region.
        CM_DECL_C(sacc, FN);
        [[unroll]] for (uint nj = 0u; nj < FN; nj++) {
            CM_ZERO(sacc[nj]);
        }
        for (uint j = 0u; j < D / CM_K; j++) {
            CM_DECL_A(a, 1);
            if (!QREG) {
                CM_LOAD_A(a[0], shQ, r0 * DP + j * CM_K, DP);
            }
            [[unroll]] for (uint nj = 0u; nj < FN; nj++) {
                CM_DECL_B(b, 1);
                CM_LOAD_BT(b[0], shKV, nj * CM_N * DP + j * CM_K, DP);
                if (QREG) {
                    CM_MULADD(sacc[nj], qa[j], b[0]);
                } else {
                    CM_MULADD(sacc[nj], a[0], b[0]);
                }
            }
        }
        [[unroll]] for (uint nj = 0u; nj < FN; nj++) {
            CM_STORE_CT(sacc[nj], shS, sbase + nj * CM_N * SS, SS);
        }
        CM_SYNC(); // the scores are written

        // The lane's masked scores, and their max.
        float s[RPL][NSL];
        float pmax[RPL];
        [[unroll]] for (uint i = 0u; i < RPL; i++) {
            pmax[i] = NEG;
            [[unroll]] for (uint j = 0u; j < NSL; j++) {
                const uint c = sub + j * LPR, key = t + c;
                float x = shS[sbase + c * SS + br[i]];
                if (MASK) {
                    const float mv = mtile[qi[i] * MS + c];
                    x = mv > NEG_HALF ? x + mv : NEG;
                } else {
                    x = (key < ke && key <= last_key[i] && key >= first[i]) ? x : NEG;
                }
                s[i][j] = x;
                pmax[i] = max(pmax[i], x);
            }
        }
        if (LPR > 1u) { // RPL is 1: combine the row's lanes' maxima
            red[lane] = pmax[0];
            CM_SYNC();
            for (uint k = 0u; k < LPR; k++) {
                pmax[0] = max(pmax[0], red[lane - sub + k]);
            }
        }

        // The rows' new max; P and alpha into the subgroup's regions.
        [[unroll]] for (uint i = 0u; i < RPL; i++) {
            const float m_new = max(m[i], pmax[i]);
            // While every score so far is masked, m_new is NEG; subtracting
            // 0 instead keeps every weight exp2(NEG) = 0 rather than 1.
            const float m_use = m_new > NEG_HALF ? m_new : 0.0;
            const float alpha = exp2(m[i] - m_use);
            m[i] = m_new;
            float psum = 0.0;
            [[unroll]] for (uint j = 0u; j < NSL; j++) {
                const float16_t p = float16_t(exp2(s[i][j] - m_use));
                shP[pbase + br[i] * PP + sub + j * LPR] = p;
                psum += float(p);
            }
            l[i] = l[i] * alpha + psum;
            if (sub == 0u) {
                shR[(sg * CM_M + br[i]) / 4u][br[i] % 4u] = alpha;
            }
        }
        CM_SYNC(); // P and alpha are written

        // O = O·alpha + P·V.
        CM_DECL_R(ra, 1);
        CM_LOAD_R4(ra[0], shR, sg * CM_M / 4u);
        [[unroll]] for (uint dj = 0u; dj < FD; dj++) {
            CM_MUL_R(o[dj], ra[0]);
        }
        for (uint kk = 0u; kk < BC / CM_K; kk++) {
            CM_DECL_A(a, 1);
            CM_LOAD_A(a[0], shP, pbase + kk * CM_K, PP);
            [[unroll]] for (uint dj = 0u; dj < FD; dj++) {
                CM_DECL_B(b, 1);
                CM_LOAD_B(b[0], shKV, (BC + kk * CM_K) * DP + dj * CM_N, DP);
                CM_MULADD(o[dj], a[0], b[0]);
            }
        }
    }

    // l is the sum of the row's lanes' partials. Unsplit, the output is
    // O/l; with SPLIT, O itself and (m, l), which flash_attn_reduce merges.
    // (Every read of red in the walk came before its last CM_SYNC.)
    float f[RPL];
    [[unroll]] for (uint i = 0u; i < RPL; i++) {
        red[lane] = l[i];
        CM_SYNC();
        float tsum = 0.0;
        for (uint k = 0u; k < LPR; k++) {
            tsum += red[lane - sub + k];
        }
        f[i] = tsum > 0.0 ? 1.0 / tsum : 0.0; // a fully masked row outputs 0
        if (SPLIT) {
            f[i] = 1.0;
            if (sub == 0u && qi[i] < qn) {
                const uint r = r0 + br[i];
                ml_out[(gl_WorkGroupID.z * pc.n_q + q0 + qi[i]) * pc.n_head + head0 + r / BR] = vec2(m[i], tsum);
            }
        }
        CM_SYNC();
    }

    // Each output fragment through the region: the lanes scale their rows
    // and write the rows inside the batch.
    const uint zbase = SPLIT ? gl_WorkGroupID.z * pc.n_q : 0u;
    for (uint dj = 0u; dj < FD; dj++) {
        CM_STORE_CT(o[dj], shS, sbase, SS);
        CM_SYNC();
        [[unroll]] for (uint i = 0u; i < RPL; i++) {
            const uint r = r0 + br[i];
            if (qi[i] < qn) {
                const uint obase = ((zbase + q0 + qi[i]) * pc.n_head + head0 + r / BR) * D + dj * CM_N;
                [[unroll]] for (uint j = 0u; j < NOL; j++) {
                    const uint c = sub + j * LPR;
                    o_out[obase + c] = shS[sbase + c * SS + br[i]] * f[i];
                }
            }
        }
        CM_SYNC();
    }
}
