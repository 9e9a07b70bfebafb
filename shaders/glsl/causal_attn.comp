#version 450
// causal_attn: plain causal attention with grouped-query heads over the f16
// KV cache. Query row i (position p = pos + i) of head h attends to the keys
// at positions first..p of KV head h / (heads / kvHeads):
//   out = softmax(scale * q.K^T) V.
// The cache is a ring of ctx rows (kv_store.comp): position k is row k mod
// ctx. first is p - window + 1 with a sliding window, else 0, and never a
// position the ring no longer holds once the batch is stored (before
// pos + n - ctx; n = gl_NumWorkGroups.y, the batch's rows).
// One workgroup per (head, row). Keys go in chunks of WG, one key per
// invocation; a running max and sum (online softmax) carry across chunks so
// any context length works without scratch memory. Each invocation owns the
// output dims d = lane + j*WG. The flash-attention kernel replaces this one;
// it stays as the simple, checkable version.
//
// The caches hold a region of ctx rows per sequence (sequence s's ring in
// rows s*ctx ..., as kv_store.comp stores them); the rows are of sequence
// seq (the step binding's second word). With SEQ_ROWS each row is one
// token of a sequence of its own (the server's batched decode): the step
// binding is a (position, sequence) pair per row, and row i attends to its
// own sequence's keys up to its own position.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_GOOGLE_include_directive : require

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;
layout(constant_id = 1) const uint NSG = 8;
layout(constant_id = 2) const uint DMAX = 256; // largest head dim
layout(constant_id = 3) const bool SEQ_ROWS = false;

layout(binding = 0) writeonly buffer Dst { float dst[]; };
layout(binding = 1) readonly buffer Q { float q[]; };
layout(binding = 2) readonly buffer KC { uint kc[]; }; // f16 pairs, [ctx][kvHeads*headDim]
layout(binding = 3) readonly buffer VC { uint vc[]; };
layout(binding = 4) readonly buffer Step { uint pos; uint seq; };
layout(binding = 4) readonly buffer Rows { uvec2 rows[]; }; // SEQ_ROWS: (position, sequence) per row

layout(push_constant) uniform Push {
    uint heads;
    uint kvHeads;
    uint headDim; // even, <= DMAX
    uint ctx;     // rows of the cache, a ring
    float scale;
    uint window;  // keys a query sees at most; 0: all earlier ones
} pc;

#define RED_N 1u
#include "reduce.glsl"

const uint DPT = (DMAX + WG - 1u) / WG; // output dims per invocation
// Finite stand-ins for -infinity keep exp() away from inf - inf.
const float NEG = -3.0e38;

shared float qs[DMAX];
shared float ps[WG];

void main() {
    uint h = gl_WorkGroupID.x, i = gl_WorkGroupID.y, lane = gl_LocalInvocationID.x;
    uint D = pc.headDim;
    uint kvDim = pc.kvHeads * D;
    uint kvOff = (h / (pc.heads / pc.kvHeads)) * D; // this head's columns in a cache row
    uint qOff = (i * pc.heads + h) * D;
    // The batch's rows of this row's sequence: n from position start on.
    uint qpos, start, n;
    if (SEQ_ROWS) {
        qpos = start = rows[i].x;
        n = 1u;
        kvOff += rows[i].y * pc.ctx * kvDim; // its sequence's region
    } else {
        kvOff += seq * pc.ctx * kvDim;
        qpos = pos + i;
        start = pos;
        n = gl_NumWorkGroups.y;
    }
    uint first = start + n > pc.ctx ? start + n - pc.ctx : 0u;
    if (pc.window > 0u && qpos + 1u > pc.window) {
        first = max(first, qpos + 1u - pc.window);
    }
    uint L = qpos + 1u - first; // keys this row attends to, at most ctx
    // The ring's row of key t (position first + t) is first + t - base,
    // less ctx once it passes the end: the keys span at most ctx positions.
    uint base = first - first % pc.ctx;

    for (uint d = lane; d < D; d += WG) {
        qs[d] = q[qOff + d] * pc.scale;
    }
    barrier();

    float m = NEG, l = 0.0;
    float o[DPT];
    for (uint j = 0u; j < DPT; j++) {
        o[j] = 0.0;
    }
    for (uint t0 = 0u; t0 < L; t0 += WG) {
        uint t = t0 + lane;
        float s = NEG;
        if (t < L) {
            uint row = first + t - base;
            row = row >= pc.ctx ? row - pc.ctx : row;
            uint kb = (row * kvDim + kvOff) >> 1;
            s = 0.0;
            for (uint d = 0u; d < D; d += 2u) {
                s += dot(unpackHalf2x16(kc[kb + d / 2u]), vec2(qs[d], qs[d + 1u]));
            }
        }
        red_v[0] = s;
        wg_reduce(true);
        float mNew = max(m, red_v[0]);
        float alpha = exp(m - mNew);
        float p = t < L ? exp(s - mNew) : 0.0;
        red_v[0] = p;
        wg_reduce(false);
        l = l * alpha + red_v[0];
        m = mNew;
        barrier(); // the previous chunk's readers are done with ps
        ps[lane] = p;
        barrier();
        uint nt = min(WG, L - t0);
        for (uint j = 0u; j < DPT; j++) {
            uint d = lane + j * WG;
            if (d < D) {
                float acc = o[j] * alpha;
                for (uint tt = 0u; tt < nt; tt++) {
                    uint row = first + t0 + tt - base;
                    row = row >= pc.ctx ? row - pc.ctx : row;
                    uint e = row * kvDim + kvOff + d;
                    acc += ps[tt] * unpackHalf2x16(vc[e >> 1])[e & 1u];
                }
                o[j] = acc;
            }
        }
    }
    for (uint j = 0u; j < DPT; j++) {
        uint d = lane + j * WG;
        if (d < D) {
            dst[qOff + d] = o[j] / l;
        }
    }
}
