#version 450
// head_rope: what comes between the q, k and v products and attention in a
// layer with head norms (Qwen3, Gemma 3), in one dispatch: the RMS norm of
// every head of q and k (each with its own weight of headDim values), the
// rotation of q in place and of k on its way into the f16 cache, and the
// store of v. As separate dispatches these are two dependent steps and
// five dispatches a layer, each mostly launch and barrier latency in
// decode.
//
// One workgroup per (row, head): x = heads of q, then of k, then of v; y =
// row (grid.y, so rows are limited by the device's grid). A q or k head is
// staged in shared memory, normalised there, and each value is then
// rotated against its partner (rope.glsl), so any layout (normal or NeoX)
// and any partial rotation work alike. The role of a workgroup is uniform
// in it, so the barriers of the q and k paths are in uniform control flow.
//
// Positions, cache rows and sequences are kv_store.comp's: row i is at
// position pos + i (or its own (position, sequence) with ROWS) and goes to
// row p mod ctx of its sequence's region; a batch longer than the ring
// keeps its last ctx rows.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_GOOGLE_include_directive : require

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;
layout(constant_id = 1) const uint NSG = 8;
layout(constant_id = 2) const uint D = 128; // head dim (even)
layout(constant_id = 3) const bool NEOX = false;
layout(constant_id = 4) const bool FREQ_FACTORS = false;
layout(constant_id = 5) const bool ROWS = false;

layout(binding = 0) buffer Q { float q[]; };                 // [n][hq][D], in place
layout(binding = 1) readonly buffer K { float k[]; };        // [n][hk][D]
layout(binding = 2) readonly buffer V { vec2 v[]; };         // [n][hk][D]
layout(binding = 3) readonly buffer QW { float qw[]; };      // [D]
layout(binding = 4) readonly buffer KW { float kw[]; };      // [D]
layout(binding = 5) writeonly buffer KC { uint kcache[]; };  // f16 pairs
layout(binding = 6) writeonly buffer VC { uint vcache[]; };  // f16 pairs
layout(binding = 7) readonly buffer Step { uint pos; uint seq; };
layout(binding = 7) readonly buffer Rows { uvec2 rows[]; };  // ROWS: (position, sequence) per row
layout(binding = 8) readonly buffer Factors { float ff[]; }; // bound to a dummy unless FREQ_FACTORS

layout(push_constant) uniform Push {
    uint n;
    uint hq;
    uint hk;
    uint ctx;      // the cache ring's rows
    uint ropeDims; // even, <= D
    float log2Base;
    float freqScale;
    float eps;
} pc;

#define RED_N 1u
#include "reduce.glsl"
#include "rope.glsl"

shared float hv[D];

// rotated is value e of the staged head after the rotation at position p.
float rotated(uint e, float p) {
    if (e >= pc.ropeDims) {
        return hv[e];
    }
    const uint r = rope_index(e, pc.ropeDims, NEOX);
    const vec2 cs = rope_cos_sin(r, pc.ropeDims, p, pc.log2Base, pc.freqScale, FREQ_FACTORS ? ff[r] : 1.0);
    return rope_rotate(hv[e], hv[rope_partner(e, pc.ropeDims, NEOX)], rope_first(e, pc.ropeDims, NEOX), cs);
}

void main() {
    const uint head = gl_WorkGroupID.x;
    const uint i = gl_WorkGroupID.y;
    const uint lane = gl_LocalInvocationID.x;
    const uint position = ROWS ? rows[i].x : pos + i;
    const uint region = (ROWS ? rows[i].y : seq) * pc.ctx;
    // Rows of distinct sequences never share a slot; consecutive ones do
    // once the batch outruns the ring.
    const bool keep = ROWS || i + pc.ctx >= pc.n;
    const uint cacheRow = (region + position % pc.ctx) * pc.hk * (D / 2u);

    if (head >= pc.hq + pc.hk) {
        // v: into the cache as it is.
        if (keep) {
            const uint h = head - pc.hq - pc.hk;
            const uint src = (i * pc.hk + h) * (D / 2u);
            for (uint w = lane; w < D / 2u; w += WG) {
                vcache[cacheRow + h * (D / 2u) + w] = packHalf2x16(v[src + w]);
            }
        }
        return;
    }

    // q or k: stage the head, normalise it, then rotate.
    const bool isQ = head < pc.hq;
    const uint base = isQ ? (i * pc.hq + head) * D : (i * pc.hk + head - pc.hq) * D;
    float ss = 0.0;
    for (uint e = lane; e < D; e += WG) {
        const float x = isQ ? q[base + e] : k[base + e];
        hv[e] = x;
        ss += x * x;
    }
    red_v[0] = ss;
    wg_reduce(false);
    const float scale = inversesqrt(red_v[0] / float(D) + pc.eps);
    for (uint e = lane; e < D; e += WG) {
        hv[e] *= scale * (isQ ? qw[e] : kw[e]);
    }
    memoryBarrierShared();
    barrier();
    const float p = float(position);
    if (isQ) {
        for (uint e = lane; e < D; e += WG) {
            q[base + e] = rotated(e, p);
        }
    } else if (keep) {
        const uint h = head - pc.hq;
        for (uint w = lane; w < D / 2u; w += WG) {
            kcache[cacheRow + h * (D / 2u) + w] = packHalf2x16(vec2(rotated(2u * w, p), rotated(2u * w + 1u, p)));
        }
    }
}
