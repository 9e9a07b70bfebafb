#version 450
// Scalar flash attention: one pass over the KV cache with an online softmax
// over tiles of BC keys (running max m, sum l and output O in f32).
//
// A workgroup is one lane group of W lanes. It owns ROWS = BR×HG query rows:
// BR consecutive positions of HG q-heads that share one KV head (in decode,
// BR = 1 and HG is the whole GQA group, so each K/V row is read once for all
// of them). The lanes form RL row slots of DL = W/RL lanes; a slot owns one
// row, and each of its lanes owns NCH chunks of CH head dims (chunk ci of a
// row is dims ci*CH.., held by lane ci % DL). Q (pre-scaled) and O for those
// dims stay in the lane's registers for the whole KV loop. In decode a K/V
// chunk is read straight from memory into the lanes that need it; prefill
// stages each tile in shared memory first (STAGE, below).
//
// The one cross-lane step is the dot product q·k, summed over the DL lanes of
// a slot: with shuffles when DL < SG, subgroupAdd when DL == SG (the lane
// group is one hardware subgroup), and subgroupAdd then shared memory when
// the slot spans several hardware subgroups (W = 64 on 32-wide hardware,
// any W on lavapipe's 8). The masked scores of a tile go to shared memory,
// one padded row per slot, for the softmax; the key loops run KU keys per
// unrolled step, so a tile costs two slot-local syncs (two workgroup
// barriers when slots span subgroups) and little code.
//
// Positions: row i of the batch is at pos+i (pos read from the step buffer at
// run time, so one recording serves every token) and sees keys 0..pos+i.
// Causality is computed, not read. An optional additive f16 mask
// [n_q][ctx] is staged per tile in shared memory, stored key-major
// with a padded stride of BR+1 so that the lanes writing consecutive keys of
// one query row and the slots reading one key for consecutive rows hit
// distinct banks. Tiles where every entry is masked are skipped.
//
// Staging (STAGE, prefill): with BR positions per workgroup every K and V
// value would be loaded and converted by each of the workgroup's row slots.
// Instead the workgroup converts the tile's K rows once into shared memory
// as f32 (kvs), the slots read their dims from there (lanes reading the
// same dims of one key get one broadcast), and V then reuses the space.
// Conversion was three integer instructions per value and slot, more than
// the multiply-adds it fed.
//
// Split-k: gl_NumWorkGroups.z splits share each row's KV range, each taking
// a contiguous run of whole tiles derived from pos at run time. With SPLIT a
// split writes its unnormalised O with (m, l), m in log2 units; an empty split
// writes m = NEG, l = 0. flash_attn_reduce.comp merges them.

#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_KHR_shader_subgroup_vote : require

// Geometry: attention.Plan, in the order flashattn passes them.
layout(constant_id = 0) const uint D = 128;      // head dim
layout(constant_id = 1) const uint W = 32;       // lanes in the lane group (= workgroup size)
layout(constant_id = 2) const uint SG = 32;      // hardware subgroup size the pipeline runs with
layout(constant_id = 3) const uint BR = 1;       // query positions per workgroup
layout(constant_id = 4) const uint HG = 1;       // q-heads per workgroup
layout(constant_id = 5) const uint BC = 32;      // keys per tile
layout(constant_id = 6) const uint RL = 4;       // row slots: power of two >= BR*HG
layout(constant_id = 7) const uint CH = 8;       // f16 values per load: 8, 4 or 2
layout(constant_id = 8) const bool MASK = false; // additive mask bound
layout(constant_id = 9) const bool SPLIT = false;// write split partials
layout(constant_id = 10) const bool STAGE = false;// K and V tiles converted once into shared memory

layout(local_size_x_id = 1) in;

const uint DL = W / RL;                    // lanes per row
const uint NCHUNK = D / CH;                // chunks in a head row
const uint NCH = (NCHUNK + DL - 1) / DL;   // chunks per lane (the last ones may be absent)
const uint HALF = CH / 2;                  // f16 pairs per chunk
const uint NV = NCH * HALF;                // vec2 registers per lane for Q, and for O
const uint ROWS = BR * HG;
const uint NSG = W / SG;                   // hardware subgroups in the lane group
const bool XSG = DL > SG;                  // a row spans several subgroups
const uint SPR = XSG ? DL / SG : 1;        // subgroups per row
const uint RED = XSG ? BC * NSG : 1;
const uint MT = MASK ? BC * (BR + 1) : 1;
const uint SCS = BC + 1;                   // score row stride, padded so slots reading one key hit distinct banks
// Keys per unrolled step: the loads of KU keys are in flight together, and
// each step waits for its loads, so a tile costs 2 BC / KU memory round
// trips (K, then V) one after the other: in decode, where a workgroup sees
// one or two tiles, these latencies are the kernel's time. KU keeps 16
// chunk loads (64 registers) in flight per lane, a power of two dividing BC.
// The step loop itself stays
// rolled, which keeps the code small (lavapipe's LLVM takes minutes over a
// fully unrolled 32-key tile).
const uint KU0 = NCH <= 1u ? 16u : (NCH <= 2u ? 8u : (NCH <= 4u ? 4u : (NCH <= 8u ? 2u : 1u)));
const uint KU = KU0 < BC ? KU0 : BC;

// Masked scores are a large finite negative rather than -inf: Vulkan does not
// promise inf arithmetic without float controls, and exp2(NEG - x) is 0.
const float NEG = -1.0e30;
const float NEG_HALF = -0.5e30;
const float LOG2E = 1.4426950408889634;

layout(push_constant) uniform Push {
    uint n_q;         // queries in the batch
    uint n_head;      // query heads
    uint n_kv_head;   // KV heads
    uint ctx;         // rows of the K/V caches, and f16 values per mask row
    float scale;      // multiplies q·k
} pc;

layout(std430, binding = 0) readonly buffer BQ { float q_in[]; };   // [n_q][n_head*D]
// K and V: f16 [position][n_kv_head*D], read CH values at a time.
layout(std430, binding = 1) readonly buffer BK1 { uint k1[]; };
layout(std430, binding = 1) readonly buffer BK2 { uvec2 k2[]; };
layout(std430, binding = 1) readonly buffer BK4 { uvec4 k4[]; };
layout(std430, binding = 2) readonly buffer BV1 { uint v1[]; };
layout(std430, binding = 2) readonly buffer BV2 { uvec2 v2[]; };
layout(std430, binding = 2) readonly buffer BV4 { uvec4 v4[]; };
layout(std430, binding = 3) readonly buffer BM { uint mask_in[]; }; // f16 [n_q][ctx]
layout(std430, binding = 4) readonly buffer BS { uint step_pos; };
// Output: f32 [n_q][n_head*D], or with SPLIT the partials [split][n_q][n_head][D].
layout(std430, binding = 5) writeonly buffer BO { float o_out[]; };
layout(std430, binding = 6) writeonly buffer BML { vec2 ml_out[]; }; // [split][n_q][n_head]

shared float red[RED];
shared float sc[RL * SCS]; // masked scores of the tile, per row slot
shared float mtile[MT];
shared uint mlive[NSG];
// The tile's K, then V, as f32 (STAGE), read 16 bytes at a time: with 8-byte
// reads a lane issued one shared load per two multiply-adds, more than the
// load units serve.
shared vec4 kvs[STAGE ? BC * D / 4 : 1];

// e indexes f16 values and is a multiple of CH; the branches on CH fold away
// at specialization.
uvec4 load_k(uint e) {
    if (CH == 8) return k4[e / 8];
    if (CH == 4) return uvec4(k2[e / 4], 0u, 0u);
    return uvec4(k1[e / 2], 0u, 0u, 0u);
}

uvec4 load_v(uint e) {
    if (CH == 8) return v4[e / 8];
    if (CH == 4) return uvec4(v2[e / 4], 0u, 0u);
    return uvec4(v1[e / 2], 0u, 0u, 0u);
}

// kv2f returns the f16 pair w as floats scaled by 2^-112, with integer
// operations only: moving the f16 exponent and mantissa into an f32 word
// (same bits, exponent bias 15 instead of 127) is exact for every finite
// value and spares the two conversion instructions per K or V value (a
// fraction of the FMA rate on NVIDIA). On the H200 it did not change decode
// time, which latency bounds (docs/ATTENTION.md). Q carries the
// compensating 2^112 (KV_SCALE) into the scores, and the softmax weights
// into O. (Drivers that flush f32 denormals lose only K/V values below
// f16's smallest normal, 6e-5 in magnitude.)
const float KV_SCALE = 5.192296858534828e33; // 2^112
vec2 kv2f(uint w) {
    return uintBitsToFloat(uvec2(((w << 13) & 0x0FFFE000u) | ((w << 16) & 0x80000000u),
                                 ((w >> 3) & 0x0FFFE000u) | (w & 0x80000000u)));
}

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
        const uint base = min(t + it / NCHUNK, ke - 1) * kv_stride + kv_off + (it % NCHUNK) * CH;
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
                kvs[e / 4 + i / 2] = vec4(kv2f(w[i]), kv2f(w[i + 1]));
            }
        }
    }
}

// kv_pairs returns the staged pairs i and i+1 (i even) of chunk ci of key c.
vec4 kv_pairs(uint c, uint ci, uint i) {
    return kvs[(c * D + ci * CH + 2 * i) / 4];
}

// The score of key t+c for query row qi (log2 units) after the mask, or the
// causal limit and the end of the range without one.
float masked(float s, uint t, uint c, uint qi, uint last_key, uint ke) {
    if (MASK) {
        const float mv = mtile[c * (BR + 1) + qi];
        return mv > NEG_HALF ? s + mv : NEG;
    }
    return (t + c < ke && t + c <= last_key) ? s : NEG;
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
    const uint kv_stride = pc.n_kv_head * D;
    const uint kv_off = kvh * D;

    // This workgroup's keys: its split's share of the batch's KV length
    // (whole tiles), cut at the causal limit of the block's last query. A
    // batch running past the cache sees the keys the cache holds, never
    // reads beyond it.
    const uint kv_len = min(pos + pc.n_q, pc.ctx);
    const uint nsplit = gl_NumWorkGroups.z;
    const uint share = ((kv_len + nsplit - 1) / nsplit + BC - 1) / BC * BC;
    const uint kb = gl_WorkGroupID.z * share;
    const uint ke = min(min(kb + share, pos + q0 + qn), kv_len);

    // Q, pre-scaled into log2 units so the softmax runs on exp2, and by
    // KV_SCALE for the K values of kv2f.
    vec2 q[NV];
    vec2 o[NV];
    const uint qbase = qrow * pc.n_head * D + head * D;
    const float qscale = pc.scale * LOG2E * KV_SCALE;
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
        if (MASK || XSG || STAGE) {
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
                if (i < qn && key < ke && key <= pos + qq) {
                    const uint idx = qq * pc.ctx + key;
                    const vec2 h = unpackHalf2x16(mask_in[idx / 2]);
                    const float x = ((idx & 1u) != 0u ? h.y : h.x) * LOG2E;
                    if (x > NEG_HALF) { // -inf (and NaN) stay masked
                        mv = x;
                    }
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
                const uint kbase = min(t + c0 + u, ke - 1) * kv_stride + kv_off;
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
                            acc += dot(q[j * HALF + i], kv2f(k[i]));
                        }
                    }
                }
                s[u] = acc;
            }
            [[unroll]] for (uint u = 0; u < KU; u++) {
                const uint c = c0 + u;
                if (DL == SG) {
                    s[u] = subgroupAdd(s[u]);
                } else if (!XSG) {
                    [[unroll]] for (uint x = 1; x < DL; x *= 2) {
                        s[u] += subgroupShuffleXor(s[u], x);
                    }
                } else {
                    s[u] = subgroupAdd(s[u]);
                    if (subgroupElect()) {
                        red[c * NSG + gl_SubgroupID] = s[u];
                    }
                }
                // Every lane of the row holds the sum; one stores it.
                if (!XSG && dl == c % DL) {
                    sc[slot * SCS + c] = masked(s[u], t, c, qi, last_key, ke);
                }
            }
        }
        if (XSG) {
            // The row's subgroups meet in shared memory: its lanes share out
            // the keys, each adding the row's partials of its keys.
            memoryBarrierShared();
            barrier();
            for (uint c = dl; c < BC; c += DL) {
                float sum = 0.0;
                [[unroll]] for (uint i = 0; i < SPR; i++) {
                    sum += red[c * NSG + slot * SPR + i];
                }
                sc[slot * SCS + c] = masked(sum, t, c, qi, last_key, ke);
            }
            memoryBarrierShared();
            barrier();
        } else {
            subgroupMemoryBarrierShared();
            subgroupBarrier();
        }

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
        const float alpha = exp2(m - m_use);
        m = m_new;
        l *= alpha;
        [[unroll]] for (uint v = 0; v < NV; v++) {
            o[v] *= alpha;
        }
        [[dont_unroll]] for (uint c0 = 0; c0 < BC; c0 += KU) {
            [[unroll]] for (uint u = 0; u < KU; u++) {
                const uint c = c0 + u;
                const float p = exp2(sc[slot * SCS + c] - m_use);
                l += p;
                const float pv = p * KV_SCALE; // for the V values of kv2f
                const uint vbase = min(t + c, ke - 1) * kv_stride + kv_off;
                [[unroll]] for (uint j = 0; j < NCH; j++) {
                    const uint ci = dl + j * DL;
                    if (ci < NCHUNK && STAGE) {
                        [[unroll]] for (uint i = 0; i < HALF; i += 2) {
                            const vec4 v = kv_pairs(c, ci, i);
                            o[j * HALF + i] += pv * v.xy;
                            o[j * HALF + i + 1] += pv * v.zw;
                        }
                    } else if (ci < NCHUNK) {
                        const uvec4 v = load_v(vbase + ci * CH);
                        [[unroll]] for (uint i = 0; i < HALF; i++) {
                            o[j * HALF + i] += pv * kv2f(v[i]);
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
