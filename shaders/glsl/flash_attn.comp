#version 450
// Scalar flash attention: one pass over the KV cache with an online softmax
// over tiles of BC keys (running max m, sum l and output O in f32).
//
// This kernel runs blocks of BR = 8 or 16 query positions (prefill);
// flash_attn_decode.comp runs one query per workgroup.
//
// A workgroup is one lane group of W lanes. It owns ROWS = BR×HG query rows:
// BR consecutive positions of HG q-heads that share one KV head. The lanes
// form RL row slots of DL = W/RL lanes; a slot owns one row, and each of its
// lanes owns NCH chunks of CH head dims (chunk ci of a row is dims ci*CH..,
// held by lane ci % DL). Q (pre-scaled) and O for those dims stay in the
// lane's registers for the whole KV loop. K/V chunks are read straight from
// memory into the lanes that need them, or each tile is staged in shared
// memory first (STAGE, below).
//
// The one cross-lane step is the dot product q·k, summed over the DL lanes of
// a slot, which lie in one hardware subgroup (the plan keeps DL <= SG): with
// shuffles, or subgroupAdd when DL == SG. The masked scores of a tile go to
// shared memory, one padded row per slot, for the softmax; the key loops run
// KU keys per unrolled step, so a tile costs two slot-local syncs and little
// code.
//
// Positions: row i of the batch is at p = pos+i (pos read from the step
// buffer at run time, so one recording serves every token) and sees keys
// first_key(p)..p: all earlier ones, or with a sliding window the latest
// window (flash_attn.glsl). Causality and the window are computed, not
// read; a workgroup walks only the keys its rows see, from its first row's
// first key, and masks per row the few that one row sees and another does
// not. Keys are loaded from their rows in the ring (ring_row). An optional
// additive f16 mask [n_q][ctx] (the entry of a key in its cache row's
// column) is staged per tile in shared memory, stored key-major
// with a padded stride of BR+1 so that the lanes writing consecutive keys of
// one query row and the slots reading one key for consecutive rows hit
// distinct banks. Tiles where every entry is masked are skipped.
//
// Staging (STAGE, prefill): with BR positions per workgroup every K and V
// value would be loaded and converted by each of the workgroup's row slots.
// Instead the workgroup converts the tile's K rows once into shared memory
// as f32 (kvs), the slots read their dims from there (lanes reading the
// same dims of one key get one broadcast), and V then reuses the space.
// Converting per value and slot cost more than the multiply-adds it fed.
//
// Split-k: gl_NumWorkGroups.z splits share each row's KV range, each taking
// a contiguous run of whole tiles derived from pos at run time. With SPLIT a
// split writes its unnormalised O with (m, l), m in log2 units; an empty split
// writes m = NEG, l = 0. flash_attn_reduce.comp merges them.

#extension GL_GOOGLE_include_directive : require
#include "flash_attn.glsl"

const uint DL = W / RL;                    // lanes per row
const uint NCHUNK = D / CH;                // chunks in a head row
const uint NCH = (NCHUNK + DL - 1) / DL;   // chunks per lane (the last ones may be absent)
const uint HALF = CH / 2;                  // f16 pairs per chunk
const uint NV = NCH * HALF;                // vec2 registers per lane for Q, and for O
const uint ROWS = BR * HG;
const uint NSG = W / SG;                   // hardware subgroups in the lane group
const uint MT = MASK ? BC * (BR + 1) : 1;
const uint SCS = BC + 1;                   // score row stride, padded so slots reading one key hit distinct banks
// Keys per unrolled step: the loads of KU keys are in flight together, and
// each unstaged step waits for its loads, so an unstaged tile costs 2 BC / KU
// memory round trips (K, then V). KU keeps 16 chunk loads (64 registers) in
// flight per lane, a power of two dividing BC. The step loop itself stays
// rolled, which keeps the code small (lavapipe's LLVM takes minutes over a
// fully unrolled 32-key tile).
const uint KU0 = NCH <= 1u ? 16u : (NCH <= 2u ? 8u : (NCH <= 4u ? 4u : (NCH <= 8u ? 2u : 1u)));
const uint KU = KU0 < BC ? KU0 : BC;

shared float sc[RL * SCS]; // masked scores of the tile, per row slot
shared float mtile[MT];
shared uint mlive[NSG];
// The tile's K, then V, as f32 (STAGE), read 16 bytes at a time: with 8-byte
// reads a lane issued one shared load per two multiply-adds, more than the
// load units serve.
shared vec4 kvs[STAGE ? BC * D / 4 : 1];

// Staging runs in two halves so that loads overlap arithmetic: fetch_tile
// issues a lane's SU chunk loads of a tile's K (or V) rows into pre_k
// (pre_v), keys from ke on repeating the last valid one (they are masked);
// store_tile converts them into kvs once they are needed. The main loop
// fetches a tile's V before its scores and the next tile's K before the
// current tile's softmax, so neither waits a memory latency of its own.
// (A loop that stored each chunk as it arrived waited one latency per
// chunk, and prefill attention ran at half its speed.) Staged plans load at
// least 4 values at a time (attention.Plan.Stage), so every chunk fills
// whole vec4s of kvs.
const uint SU = (BC * NCHUNK + W - 1) / W; // chunks each lane stages
uvec4 pre_k[STAGE ? SU : 1];
uvec4 pre_v[STAGE ? SU : 1];

void fetch_tile(bool v, uint lane, uint t, uint ke, uint kv_stride, uint kv_off) {
    [[unroll]] for (uint r = 0; r < SU; r++) {
        const uint it = min(lane + r * W, BC * NCHUNK - 1);
        const uint base = ring_row(min(t + it / NCHUNK, ke - 1)) * kv_stride + kv_off + (it % NCHUNK) * CH;
        if (v) {
            pre_v[r] = load_v(base);
        } else {
            pre_k[r] = load_k(base);
        }
    }
}

void store_tile(bool v, uint lane) {
    [[unroll]] for (uint r = 0; r < SU; r++) {
        const uint it = lane + r * W;
        if (it < BC * NCHUNK) {
            const uint e = it * CH; // = key * D + dim: chunks tile the rows
            const uvec4 w = v ? pre_v[r] : pre_k[r];
            [[unroll]] for (uint i = 0; i < HALF; i += 2) {
                kvs[e / 4 + i / 2] = vec4(unpackHalf2x16(w[i]), unpackHalf2x16(w[i + 1]));
            }
        }
    }
}

// kv_pairs returns the staged pairs i and i+1 (i even) of chunk ci of key c.
vec4 kv_pairs(uint c, uint ci, uint i) {
    return kvs[(c * D + ci * CH + 2 * i) / 4];
}

// The score of key t+c for query row qi (log2 units) after the mask, or the
// row's keys (first_key..last_key) and the end of the range without one.
float masked(float s, uint t, uint c, uint qi, uint first, uint last_key, uint ke) {
    if (MASK) {
        const float mv = mtile[c * (BR + 1) + qi];
        return mv > NEG_HALF ? s + mv : NEG;
    }
    return (t + c < ke && t + c <= last_key && t + c >= first) ? s : NEG;
}

void main() {
    // Lanes are numbered from subgroup ids so that a row's DL lanes are
    // consecutive within a subgroup, whatever order the invocations have.
    const uint lane = gl_SubgroupID * SG + gl_SubgroupInvocationID;
    const uint slot = lane / DL;
    const uint dl = lane % DL;
    // Slots past ROWS repeat the last row (keeping every lane in step for the
    // reductions) and write nothing.
    const uint row = min(slot, ROWS - 1);
    const uint qi = row % BR;
    const uint hl = row / BR;

    const uint group = pc.n_head / pc.n_kv_head;
    const uint hgroups = group / HG;
    const uint kvh = gl_WorkGroupID.y / hgroups;
    const uint head = kvh * group + (gl_WorkGroupID.y % hgroups) * HG + hl;
    const uint q0 = gl_WorkGroupID.x * BR;
    const uint qn = min(BR, pc.n_q - q0);        // positions of the block inside the batch
    const uint qrow = q0 + min(qi, qn - 1);
    const bool writes = slot < ROWS && qi < qn;

    const uint pos = step_pos;
    const uint last_key = pos + qrow;            // causal limit of this row
    const uint first = first_key(pos, pc.n_q, last_key); // and its window's start
    const uint kv_stride = pc.n_kv_head * D;
    const uint kv_off = (step_seq * pc.ctx) * kv_stride + kvh * D;

    // This workgroup's keys, from the window of the block's first query to
    // the causal limit of its last.
    const uvec2 keys = key_range(pos, pc.n_q, pos + q0, pos + q0 + qn);
    const uint kb = keys.x;
    const uint ke = keys.y;
    ring_init(kb);

    // Q, pre-scaled into log2 units so the softmax runs on exp2.
    vec2 q[NV];
    vec2 o[NV];
    const uint qbase = qrow * pc.n_head * D + head * D;
    const float qscale = pc.scale * LOG2E;
    [[unroll]] for (uint j = 0; j < NCH; j++) {
        const uint ci = dl + j * DL;
        [[unroll]] for (uint i = 0; i < HALF; i++) {
            vec2 x = vec2(0.0);
            if (ci < NCHUNK) {
                const uint e = qbase + ci * CH + 2 * i;
                x = vec2(q_in[e], q_in[e + 1]);
            }
            q[j * HALF + i] = x * qscale;
            o[j * HALF + i] = vec2(0.0);
        }
    }
    float m = NEG;
    float l = 0.0;

    if (STAGE && kb < ke) {
        fetch_tile(false, lane, kb, ke, kv_stride, kv_off);
    }
    for (uint t = kb; t < ke; t += BC) {
        // The previous tile's reads of shared memory are done.
        if (MASK || STAGE) {
            barrier();
        } else {
            subgroupBarrier();
        }
        if (MASK) {
            bool live = false;
            for (uint e = lane; e < BR * BC; e += W) {
                const uint i = e / BC;
                const uint c = e % BC;
                const uint key = t + c;
                const uint qq = q0 + i;
                float mv = NEG;
                if (i < qn && key < ke && key <= pos + qq && key >= first_key(pos, pc.n_q, pos + qq)) {
                    mv = mask_log2(qq * pc.ctx + ring_row(key));
                }
                mtile[c * (BR + 1) + i] = mv;
                live = live || mv > NEG_HALF;
            }
            live = subgroupAny(live);
            if (subgroupElect()) {
                mlive[gl_SubgroupID] = live ? 1u : 0u;
            }
            memoryBarrierShared();
            barrier();
            bool any = false;
            [[unroll]] for (uint i = 0; i < NSG; i++) {
                any = any || mlive[i] != 0u;
            }
            if (!any) {
                // Uniform: every lane read the same flags.
                if (STAGE && t + BC < ke) {
                    fetch_tile(false, lane, t + BC, ke, kv_stride, kv_off);
                }
                continue;
            }
        }

        if (STAGE) {
            store_tile(false, lane);
            fetch_tile(true, lane, t, ke, kv_stride, kv_off); // in flight during the scores
            memoryBarrierShared();
            barrier();
        }

        // Scores q·k of the tile's keys, KU keys at a time: each lane sums
        // its dims, then the row's DL lanes reduce. Keys past ke load the
        // last valid key (no branch around the loads) and are masked.
        [[dont_unroll]] for (uint c0 = 0; c0 < BC; c0 += KU) {
            float s[16]; // KU used; a fixed size keeps it in registers
            [[unroll]] for (uint u = 0; u < KU; u++) {
                const uint kbase = ring_row(min(t + c0 + u, ke - 1)) * kv_stride + kv_off;
                float acc = 0.0;
                [[unroll]] for (uint j = 0; j < NCH; j++) {
                    const uint ci = dl + j * DL;
                    if (ci < NCHUNK && STAGE) {
                        [[unroll]] for (uint i = 0; i < HALF; i += 2) {
                            const vec4 k = kv_pairs(c0 + u, ci, i);
                            acc += dot(q[j * HALF + i], k.xy) + dot(q[j * HALF + i + 1], k.zw);
                        }
                    } else if (ci < NCHUNK) {
                        const uvec4 k = load_k(kbase + ci * CH);
                        [[unroll]] for (uint i = 0; i < HALF; i++) {
                            acc += dot(q[j * HALF + i], unpackHalf2x16(k[i]));
                        }
                    }
                }
                s[u] = acc;
            }
            [[unroll]] for (uint u = 0; u < KU; u++) {
                const uint c = c0 + u;
                if (DL == SG) {
                    s[u] = subgroupAdd(s[u]);
                } else {
                    [[unroll]] for (uint x = 1; x < DL; x *= 2) {
                        s[u] += subgroupShuffleXor(s[u], x);
                    }
                }
                // Every lane of the row holds the sum; one stores it.
                if (dl == c % DL) {
                    sc[slot * SCS + c] = masked(s[u], t, c, qi, first, last_key, ke);
                }
            }
        }
        subgroupMemoryBarrierShared();
        subgroupBarrier();

        if (STAGE) {
            barrier(); // every slot has read the tile's K
            store_tile(true, lane);
            if (t + BC < ke) {
                fetch_tile(false, lane, t + BC, ke, kv_stride, kv_off); // in flight during the softmax
            }
            memoryBarrierShared();
            barrier();
        }

        // Online softmax: rescale by the new running max, then add the tile.
        float tmax = NEG;
        [[unroll]] for (uint c = 0; c < BC; c++) {
            tmax = max(tmax, sc[slot * SCS + c]);
        }
        const float m_new = max(m, tmax);
        // While every score so far is masked, m_new is NEG; subtracting 0
        // instead keeps every weight exp2(NEG) = 0 rather than exp2(0) = 1.
        const float m_use = m_new > NEG_HALF ? m_new : 0.0;
        if (m_new > m) {
            // The running max moved, which becomes rare once it settles:
            // a warp skips the rescale when none of its rows needs it.
            const float alpha = exp2(m - m_use);
            l *= alpha;
            [[unroll]] for (uint v = 0; v < NV; v++) {
                o[v] *= alpha;
            }
        }
        m = m_new;
        [[dont_unroll]] for (uint c0 = 0; c0 < BC; c0 += KU) {
            [[unroll]] for (uint u = 0; u < KU; u++) {
                const uint c = c0 + u;
                const float p = exp2(sc[slot * SCS + c] - m_use);
                l += p;
                const uint vbase = ring_row(min(t + c, ke - 1)) * kv_stride + kv_off;
                [[unroll]] for (uint j = 0; j < NCH; j++) {
                    const uint ci = dl + j * DL;
                    if (ci < NCHUNK && STAGE) {
                        [[unroll]] for (uint i = 0; i < HALF; i += 2) {
                            const vec4 v = kv_pairs(c, ci, i);
                            o[j * HALF + i] += p * v.xy;
                            o[j * HALF + i + 1] += p * v.zw;
                        }
                    } else if (ci < NCHUNK) {
                        const uvec4 v = load_v(vbase + ci * CH);
                        [[unroll]] for (uint i = 0; i < HALF; i++) {
                            o[j * HALF + i] += p * unpackHalf2x16(v[i]);
                        }
                    }
                }
            }
        }
    }

    if (!writes) {
        return;
    }
    const uint r = qrow * pc.n_head + head; // row of [n_q][n_head]
    uint obase;
    float f;
    if (SPLIT) {
        const uint pr = gl_WorkGroupID.z * pc.n_q * pc.n_head + r;
        obase = pr * D;
        f = 1.0;
        if (dl == 0) {
            ml_out[pr] = vec2(m, l);
        }
    } else {
        obase = r * D;
        f = l > 0.0 ? 1.0 / l : 0.0; // a fully masked row outputs 0
    }
    [[unroll]] for (uint j = 0; j < NCH; j++) {
        const uint ci = dl + j * DL;
        if (ci < NCHUNK) {
            [[unroll]] for (uint i = 0; i < HALF; i++) {
                const vec2 x = o[j * HALF + i] * f;
                const uint e = obase + ci * CH + 2 * i;
                o_out[e] = x.x;
                o_out[e + 1] = x.y;
            }
        }
    }
}
