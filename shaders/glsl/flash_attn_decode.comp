#version 450
// Flash attention for one query row per workgroup (decode, Br = 1): the
// layout is turned around from flash_attn.comp's. There, each of a KV head's
// q-heads had a slot of lanes, so every slot loaded and converted the same
// K and V rows: in decode the four slots of Llama-3 did four times the
// loads and the f16 decoding, and the kernel ran at a third of the copy
// bandwidth. Here each lane holds its dims of Q and O for all HG q-heads of
// the workgroup, and the lanes form SL key slots of KL lanes: a slot reads
// one key row at a time (KL lanes × CH f16 values), decodes it once and
// feeds it to every head.
//
// A step takes KU keys per slot (BC = SL×KU for the workgroup). A step
// finds its K and V loaded and issues the next step's at once, so they are
// in flight during all of its arithmetic. (Issuing a step's K and V at its
// top and waiting for both, as the kernel did until the fifth session, left
// the memory idle while the workgroups computed: 34.6 µs against 32.1 per
// Llama-3 layer at KV 16384 on the H200; loading only the next step's K
// ahead, 32.6. The loads in flight need registers, which 4-value loads
// free: see attention.Plan.)
//
// The partial scores (KU keys × HG heads per lane) are summed over the
// slot's KL lanes by a transposing reduction: at each of the log2 KL
// butterfly steps a lane keeps half of its values and trades the other half
// with its partner, so NP values take about NP shuffles instead of
// NP × log2 KL. Each lane then holds NF full scores (one for Llama-3's 4
// heads × 4 keys: the first 16 of a slot's 32 lanes hold one each, the rest
// copies) and turns them into softmax weights itself;
// the weights go through shared memory to every lane of the slot for the V
// products.
//
// Every subgroup of a workgroup runs the same sequence of subgroup
// barriers, whichever branches it takes: two per step, the masked-skip
// path and the rare max raise included (the raise writes its scores before
// the step's first barrier and reads them after it). The specification
// asks this of none but the subgroup itself; Mesa 25's lavapipe runs a
// subgroup barrier as a workgroup barrier and computes garbage otherwise
// (docs/VULKAN.md).
//
// The running max of each head moves lazily: a weight is taken against the
// max as it stands, exp2(s - m), and the max is only raised (rescaling O and
// l) when a score passes it by more than LAZY (weights stay below 2^LAZY, far
// from overflowing l and O). That is rare once the first keys are in, and it
// spares the common step a max over every score of the step in every lane:
// one exp2 per lane instead of one per score.
//
// Slots keep their own running max m, sum l and O for each head and meet
// once at the end, one head at a time, in shared memory; a slot lies within
// one hardware subgroup (the plan keeps KL <= the subgroup size), so the
// key loop has no workgroup barrier at all.
//
// The workgroup is one or more lane groups of the wave (attention.Plan's
// Groups): the slots of all of them share the key range and merge at the
// end. More slots per workgroup mean fewer splits for the same number of
// lanes on the device, which keeps the split merge below short (256 splits
// of one lane group each made the last split's merge the kernel's longest
// part).
//
// Split-k: each split writes its unnormalised O with its (m, l), as
// flash_attn.comp does, then counts itself done on an atomic counter of its
// rows; the split that finishes last merges every split's partials
// (split_merge.glsl) and resets the counter for the next dispatch. Decode
// thus takes one dispatch instead of two: the reduce pass cost 7–9 µs per
// Llama-3 layer on the H200, mostly the barrier before it.
//
// Positions, masking (computed causality and window, the ring of cache
// rows, the optional additive mask, tiles whose keys are all masked
// skipped) and the output are those of flash_attn.comp; with one query per
// workgroup the key range is exactly the row's keys (a window is just a
// later start, and the splits share only it), and the mask is read straight
// from memory (each slot's lanes read the same entries) instead of staged.

#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_memory_scope_semantics : require
#include "flash_attn.glsl"

const uint SL = RL;                      // key slots
const uint KL = W / SL;                  // lanes per slot, at most SG
const uint KU = BC / SL;                 // keys per slot and step
const uint NCHUNK = D / CH;              // chunks in a head row
const uint NCH = (NCHUNK + KL - 1) / KL; // chunks per lane (the last ones may be absent)
const uint HALF = CH / 2;                // f16 pairs per chunk
const uint NV = NCH * HALF;              // vec2 registers per lane and head, for Q and for O
// Partial scores per lane and step: KU keys × the heads padded to a power
// of two, at index h × KU + u.
const uint HGP = HG <= 1u ? 1u : (HG <= 2u ? 2u : (HG <= 4u ? 4u : (HG <= 8u ? 8u : 16u)));
const uint NP = KU * HGP;
const uint TR = NP < KL ? NP : KL;       // lanes the reduction transposes over
const uint NF = NP / TR;                 // full sums a lane holds after it
const float LAZY = 8.0;                  // how far a score may pass the running max (log2 units)

// Q8OUT: the output is also written in the q8 layout (head dims in blocks
// of 32): by the merge with split-k, else by each workgroup for its heads.
layout(constant_id = 11) const bool Q8OUT = false;

// Split-k merge: other splits' partials read back (views of o_out and
// ml_out), the merged output, its q8 copy and one counter per workgroup
// column (query × head group).
layout(std430, binding = 5) coherent readonly buffer BP { vec4 part[]; };
layout(std430, binding = 6) coherent readonly buffer BPML { vec2 part_ml[]; };
layout(std430, binding = 7) writeonly buffer BF { vec4 merged[]; }; // [n_q][n_head][D]
layout(std430, binding = 7) writeonly buffer BFS { float merged_f[]; };
layout(std430, binding = 8) writeonly buffer Q8W { uint q8w[]; };
layout(std430, binding = 8) writeonly buffer Q8F { float q8f[]; };
layout(std430, binding = 9) coherent buffer BCNT { uint counts[]; };

const uint SM_D = D;
const uint SM_N = W;
const bool SM_Q8 = Q8OUT;
#include "split_merge.glsl"

// HM: heads the slots merge at a time at the end (as many as the shared
// memory holds: attention.Plan.MergeHeads).
layout(constant_id = 12) const uint HM = 1;
// SEQ_ROWS: each query is one token of a sequence of its own (the server's
// batched decode). The step binding is then a (position, sequence) pair per
// query, each reading its own sequence's region of K and V. Each query's
// keys are its own sequence's 0..p (or its window), so the splits' shares
// differ from row to row; the merge weighs an empty share as nothing.
layout(constant_id = 13) const bool SEQ_ROWS = false;
// LEAST: the fewest steps of keys a split takes (see key_split).
const uint LEAST = 4u;
layout(std430, binding = 4) readonly buffer BSR { uvec2 step_rows[]; };
// The key loop's weights per slot and, from SCB on, the scores of a max
// raise (WSZ), and after the loop HM heads' O of each slot for the final
// merge (MSZ): one array, as the two are never live together.
const uint SCB = SL * NP;
const uint WSZ = 2 * SL * NP;
const uint MSZ = SL * HM * D;
shared float shm[WSZ > MSZ ? WSZ : MSZ];
shared vec2 mml[SL * HM];     // and their (m, l)
shared bool last;          // this split finished its rows' last

// PICK sets r to a[i] for a lane-dependent i < n, by selects: indexing a
// register array with it would send the array to memory.
#define PICK(r, a, i, n)                 \
    r = a[0];                            \
    [[unroll]] for (uint pk = 1; pk < (n); pk++) { \
        r = (i) == pk ? a[pk] : r;       \
    }

void main() {
    const uint lane = gl_SubgroupID * SG + gl_SubgroupInvocationID;
    const uint slot = lane / KL;
    const uint dl = lane % KL;

    const uint group = pc.n_head / pc.n_kv_head;
    const uint hgroups = group / HG;
    const uint kvh = gl_WorkGroupID.y / hgroups;
    const uint head0 = kvh * group + (gl_WorkGroupID.y % hgroups) * HG;
    const uint qrow = gl_WorkGroupID.x;

    // This workgroup's keys (in whole steps): its split's share of the
    // row's window, up to its causal limit.
    const uint kv_stride = pc.n_kv_head * D;
    uint kv_off = kvh * D;
    // A split takes LEAST steps at least, so that early in a sequence
    // (the split count is the one for the whole context) the keys sit in
    // few splits: the splits past them return at once, and one split alone
    // writes the output itself, with no partials, count or merge.
    uvec3 keys;
    if (SEQ_ROWS) {
        const uvec2 ps = step_rows[qrow];
        kv_off += ps.y * pc.ctx * kv_stride; // its sequence's region
        keys = key_split(ps.x, 1u, ps.x, ps.x + 1u, LEAST);
    } else {
        kv_off += step_seq * pc.ctx * kv_stride;
        const uint pos = step_pos;
        keys = key_split(pos, pc.n_q, pos + qrow, pos + qrow + 1, LEAST);
    }
    const uint used = keys.z; // uniform in the workgroup, as its row is
    if (SPLIT && gl_WorkGroupID.z >= used) {
        return; // no keys: nothing to write or count
    }
    const bool split = SPLIT && used > 1u;
    const uint kb = keys.x;
    const uint ke = keys.y;
    ring_init(kb);

    // After the reduction a lane holds the full sums of scores rbase ..
    // rbase+NF-1 (score index h × KU + u): each transposing step on lane
    // bit b keeps the half whose index bit NP/(2b) is the lane's bit. Lanes
    // past TR hold copies.
    uint rbase = 0;
    [[unroll]] for (uint b = 1; b < TR; b *= 2) {
        if ((dl & b) != 0) {
            rbase += NP / (2 * b);
        }
    }
    // So that every step of the reduction keeps its lower half and trades
    // the upper one, with no selects, a lane's partial score y is that of
    // index y ^ rbase: its Q registers of head slot h hold head h ^ hx and
    // its K registers of key slot u key u ^ ux. (Choosing the halves by
    // the lane's bit took two selects per shuffle.) O, the weights and the
    // V rows stay in index order.
    const uint hx = rbase / KU;
    const uint ux = rbase % KU;

    // LOAD_ROWS(r, load, first, px) loads this lane's chunks of KU K or V
    // rows from key first on, key first + (u ^ px) into slot u. Keys past
    // ke load the last valid key (no branch around the loads) and are
    // masked.
#define LOAD_ROWS(r, load, first, px)                                       \
    [[unroll]] for (uint u = 0; u < KU; u++) {                              \
        const uint base = ring_row(min((first) + (u ^ (px)), ke - 1)) * kv_stride + kv_off; \
        [[unroll]] for (uint j = 0; j < NCH; j++) {                         \
            const uint ci = dl + j * KL;                                    \
            r[u * NCH + j] = ci < NCHUNK ? load(base + ci * CH) : uvec4(0u); \
        }                                                                   \
    }
    // The first step's K and V are issued before Q is loaded: they come
    // from memory, Q from the cache, and neither waits for the other.
    uvec4 kn[KU * NCH]; // the next step's K and V, in flight
    uvec4 vn[KU * NCH];
    if (kb < ke) {
        LOAD_ROWS(kn, load_k, kb + slot * KU, ux)
        LOAD_ROWS(vn, load_v, kb + slot * KU, 0)
    }
    // Q of every head, pre-scaled into log2 units so the softmax runs on
    // exp2; the padding heads of a group that is not a power of two are 0.
    vec2 q[HGP * NV];
    vec2 o[HG * NV];
    float m[HG];
    const float qscale = pc.scale * LOG2E;
    [[unroll]] for (uint hs = 0; hs < HGP; hs++) {
        const uint h = hs ^ hx;
        const uint qbase = (qrow * pc.n_head + head0 + h) * D;
        [[unroll]] for (uint j = 0; j < NCH; j++) {
            const uint ci = dl + j * KL;
            [[unroll]] for (uint i = 0; i < HALF; i++) {
                vec2 x = vec2(0.0);
                if (ci < NCHUNK && h < HG) {
                    const uint e = qbase + ci * CH + 2 * i;
                    x = vec2(q_in[e], q_in[e + 1]);
                }
                q[(hs * NCH + j) * HALF + i] = x * qscale;
            }
        }
    }
    [[unroll]] for (uint v = 0; v < HG * NV; v++) {
        o[v] = vec2(0.0);
    }
    [[unroll]] for (uint h = 0; h < HG; h++) {
        m[h] = NEG;
    }
    // A lane sums the weights of its own scores; the slot's lanes add them
    // up per head at the end (one add per score instead of one per head
    // and key in every lane).
    float lw[NF];
    [[unroll]] for (uint x = 0; x < NF; x++) {
        lw[x] = 0.0;
    }

    for (uint t = kb; t < ke; t += BC) {
        const uint k0 = t + slot * KU; // this slot's first key
        float mv[KU]; // the mask's addend for each key, log2 units
        if (MASK) {
            bool live = false;
            [[unroll]] for (uint u = 0; u < KU; u++) {
                mv[u] = k0 + u < ke ? mask_log2(qrow * pc.ctx + ring_row(k0 + u)) : NEG;
                live = live || mv[u] > NEG_HALF;
            }
            // Uniform in the subgroup, so the shuffles below stay whole.
            if (!subgroupAny(live)) {
                if (t + BC < ke) {
                    LOAD_ROWS(kn, load_k, k0 + BC, ux)
                    LOAD_ROWS(vn, load_v, k0 + BC, 0)
                }
                // The step's two barriers, as every step has.
                subgroupBarrier();
                subgroupBarrier();
                continue;
            }
        }

        // This step's K and V, loaded during the last step; the next
        // step's now.
        uvec4 kr[KU * NCH];
        uvec4 vr[KU * NCH];
        [[unroll]] for (uint x = 0; x < KU * NCH; x++) {
            kr[x] = kn[x];
            vr[x] = vn[x];
        }
        if (t + BC < ke) {
            LOAD_ROWS(kn, load_k, k0 + BC, ux)
            LOAD_ROWS(vn, load_v, k0 + BC, 0)
        }

        // This lane's share of q·k for every key and head slot, each K pair
        // decoded once for all heads.
        float s[NP];
        [[unroll]] for (uint x = 0; x < NP; x++) {
            s[x] = 0.0;
        }
        [[unroll]] for (uint u = 0; u < KU; u++) {
            [[unroll]] for (uint j = 0; j < NCH; j++) {
                [[unroll]] for (uint i = 0; i < HALF; i++) {
                    const vec2 k = unpackHalf2x16(kr[u * NCH + j][i]);
                    [[unroll]] for (uint h = 0; h < HGP; h++) {
                        s[h * KU + u] += dot(q[(h * NCH + j) * HALF + i], k);
                    }
                }
            }
        }
        // The transposing reduction over the slot's lanes; once a lane is
        // down to one value the remaining steps are plain butterflies.
        [[unroll]] for (uint b = 1; b < KL; b *= 2) {
            const uint n = NP / b; // values a lane holds before this step
            if (n >= 2) {
                [[unroll]] for (uint x = 0; x < n / 2; x++) {
                    s[x] += subgroupShuffleXor(s[x + n / 2], b);
                }
            } else {
                s[0] += subgroupShuffleXor(s[0], b);
            }
        }
        // This lane's scores, index h × KU + u: masked (NEG) past ke, where
        // the mask excludes the key and for the padding heads (h >= HG).
        bool big = false; // a score passes its head's max by more than LAZY
        float mh[NF];     // each score's head max
        [[unroll]] for (uint x = 0; x < NF; x++) {
            const uint h = (rbase + x) / KU;
            const uint u = (rbase + x) % KU;
            PICK(mh[x], m, h, HG)
            bool live = h < HG && k0 + u < ke;
            if (MASK) {
                float mu;
                PICK(mu, mv, u, KU)
                live = live && mu > NEG_HALF;
                s[x] += mu;
            }
            s[x] = live ? s[x] : NEG;
            big = big || s[x] > mh[x] + LAZY;
        }
        // The step's first barrier: the previous step's reads of the
        // weights are done, and a max raise's scores are written. A raise
        // (uniform in the subgroup) takes all the step's scores of the slot
        // through the scores area to every lane.
        const bool raise = subgroupAny(big);
        if (raise && dl < TR) {
            [[unroll]] for (uint x = 0; x < NF; x++) {
                shm[SCB + slot * NP + rbase + x] = s[x];
            }
        }
        subgroupMemoryBarrierShared();
        subgroupBarrier();
        if (raise) {
            [[unroll]] for (uint h = 0; h < HG; h++) {
                float tmax = m[h];
                [[unroll]] for (uint u = 0; u < KU; u++) {
                    tmax = max(tmax, shm[SCB + slot * NP + h * KU + u]);
                }
                if (tmax > m[h]) {
                    // While every score so far was masked m is NEG, and O and
                    // l are 0: alpha = 0 leaves them so.
                    const float alpha = exp2(m[h] - tmax);
                    [[unroll]] for (uint v = 0; v < NV; v++) {
                        o[h * NV + v] *= alpha;
                    }
                    m[h] = tmax;
                }
            }
            [[unroll]] for (uint x = 0; x < NF; x++) {
                const float old = mh[x];
                PICK(mh[x], m, (rbase + x) / KU, HG)
                lw[x] *= exp2(old - mh[x]);
            }
        }
        // The weights, against each head's max: masked scores weigh 0 (m
        // may still be NEG, where exp2(NEG - m) would be 1).
        const uint wb = slot * NP;
        [[unroll]] for (uint x = 0; x < NF; x++) {
            const float w = s[x] > NEG_HALF ? exp2(s[x] - mh[x]) : 0.0;
            lw[x] += w;
            if (dl < TR) {
                shm[wb + rbase + x] = w;
            }
        }
        subgroupMemoryBarrierShared();
        subgroupBarrier(); // the step's second: the weights are written
        float p[HG * KU];
        [[unroll]] for (uint h = 0; h < HG; h++) {
            [[unroll]] for (uint u = 0; u < KU; u++) {
                p[h * KU + u] = shm[wb + h * KU + u];
            }
        }
        [[unroll]] for (uint u = 0; u < KU; u++) {
            [[unroll]] for (uint j = 0; j < NCH; j++) {
                [[unroll]] for (uint i = 0; i < HALF; i++) {
                    const vec2 v = unpackHalf2x16(vr[u * NCH + j][i]);
                    [[unroll]] for (uint h = 0; h < HG; h++) {
                        o[(h * NCH + j) * HALF + i] += p[h * KU + u] * v;
                    }
                }
            }
        }
    }

    // Each head's l: the weights the slot's lanes summed (lanes past TR
    // hold copies and add nothing).
    float l[HG];
    [[unroll]] for (uint h = 0; h < HG; h++) {
        l[h] = 0.0;
        [[unroll]] for (uint x = 0; x < NF; x++) {
            l[h] += dl < TR && (rbase + x) / KU == h ? lw[x] : 0.0;
        }
        [[unroll]] for (uint b = 1; b < KL; b *= 2) {
            l[h] += subgroupShuffleXor(l[h], b);
        }
    }

    // The slots meet, HM heads at a time: M = max m_s, w_s = exp2(m_s - M),
    // O = Σ w_s O_s and L = Σ w_s l_s, written as flash_attn.comp writes
    // them (normalised, or with SPLIT the partial and its (M, L)). Each
    // round costs two barriers, so the fewer the better.
    [[unroll]] for (uint h0 = 0; h0 < HG; h0 += HM) {
        barrier(); // the key loop's or the previous round's reads of shm are done
        [[unroll]] for (uint hh = 0; hh < HM; hh++) {
            const uint h = h0 + hh;
            if (h < HG) {
                if (dl == 0) {
                    mml[slot * HM + hh] = vec2(m[h], l[h]);
                }
                [[unroll]] for (uint j = 0; j < NCH; j++) {
                    const uint ci = dl + j * KL;
                    if (ci < NCHUNK) {
                        [[unroll]] for (uint i = 0; i < HALF; i++) {
                            const uint e = (slot * HM + hh) * D + ci * CH + 2 * i;
                            shm[e] = o[(h * NCH + j) * HALF + i].x;
                            shm[e + 1] = o[(h * NCH + j) * HALF + i].y;
                        }
                    }
                }
            }
        }
        memoryBarrierShared();
        barrier();
        for (uint x = lane; x < HM * D; x += W) {
            const uint hh = x / D;
            const uint d = x % D;
            if (h0 + hh >= HG) {
                break; // x only grows
            }
            float mx = NEG;
            [[unroll]] for (uint r = 0; r < SL; r++) {
                mx = max(mx, mml[r * HM + hh].x);
            }
            const float mx_use = mx > NEG_HALF ? mx : 0.0;
            float lsum = 0.0;
            float acc = 0.0;
            [[unroll]] for (uint r = 0; r < SL; r++) {
                const float w = exp2(mml[r * HM + hh].x - mx_use);
                lsum += w * mml[r * HM + hh].y;
                acc += w * shm[(r * HM + hh) * D + d];
            }
            const uint row = qrow * pc.n_head + head0 + h0 + hh; // row of [n_q][n_head]
            if (split) {
                const uint pr = gl_WorkGroupID.z * pc.n_q * pc.n_head + row;
                o_out[pr * D + d] = acc;
                if (d == 0) {
                    ml_out[pr] = vec2(mx, lsum);
                }
            } else {
                const float o = lsum > 0.0 ? acc / lsum : 0.0; // a fully masked row outputs 0
                if (SPLIT) {
                    merged_f[row * D + d] = o; // the one split with keys
                } else {
                    o_out[row * D + d] = o;
                }
                if (Q8OUT) {
                    // Kept for the rounding below. Only this lane reads or
                    // writes shm[x] in this round: it read slot 0's O of
                    // element x above, and the other slots lie past HM × D.
                    shm[x] = o;
                }
            }
        }
        if (Q8OUT && !split) {
            // The 8-bit copy for the output projection, a block of 32
            // values of one head per lane (D is a multiple of 32), so that
            // decode needs no quantization dispatch after attention. The
            // next round's first barrier keeps shm until these reads end.
            memoryBarrierShared();
            barrier();
            const uint nh = min(HM, HG - h0); // heads of this round
            for (uint b = lane; b < nh * (D / 32); b += W) {
                vec4 v[8];
                [[unroll]] for (uint j = 0; j < 8; j++) {
                    v[j] = vec4(shm[32 * b + 4 * j], shm[32 * b + 4 * j + 1], shm[32 * b + 4 * j + 2],
                                shm[32 * b + 4 * j + 3]);
                }
                q8_store((qrow * pc.n_head + head0 + h0) * (D / 32) + b, pc.n_q * pc.n_head * (D / 32), v);
            }
        }
    }
    if (!split) {
        return;
    }

    // Count this split done once all its partials are out; the last one to
    // count merges. The release/acquire chain on buffer memory: each lane's
    // partial writes, released at device scope by the first control barrier
    // to lane 0; lane 0's count, a device-scope release and acquire on the
    // counter, so the last split's count reads from every other split's;
    // the second control barrier, which passes that acquire on to the
    // split's other lanes (workgroup scope suffices there, the chain being
    // cumulative, and spares every split a device-scope fence). The chain
    // is the merge's cost (docs/ATTENTION.md): every round trip to memory
    // it saves shows.
    const uint col = qrow * gl_NumWorkGroups.y + gl_WorkGroupID.y;
    controlBarrier(gl_ScopeWorkgroup, gl_ScopeDevice, gl_StorageSemanticsBuffer | gl_StorageSemanticsShared,
                   gl_SemanticsAcquireRelease);
    if (lane == 0) {
        last = atomicAdd(counts[col], 1u, gl_ScopeDevice, gl_StorageSemanticsBuffer, gl_SemanticsAcquireRelease) ==
               used - 1u;
    }
    controlBarrier(gl_ScopeWorkgroup, gl_ScopeWorkgroup, gl_StorageSemanticsBuffer | gl_StorageSemanticsShared,
                   gl_SemanticsAcquireRelease);
    if (!last) {
        return;
    }
    merge_rows(qrow * pc.n_head + head0, HG, pc.n_q * pc.n_head, used, lane);
    if (lane == 0) {
        // Every split has counted and none will again in this dispatch; a
        // plain store (no atomic round trip) leaves the counter at zero for
        // the next one, which a barrier separates from this.
        counts[col] = 0u;
    }
}
