#version 450
// kv_store: writes n f32 rows of kvDim values, positions pos..pos+n-1 (pos
// from the step buffer), into the f16 cache of ctx rows, a ring: position p
// goes to row p mod ctx. A sliding-window layer keeps only its window
// (ctx = min(context, window + batch - 1) rows), a global one every
// position (ctx = context, where p < ctx and the row is p). One invocation
// per pair of values. A batch longer than the ring keeps its ctx last rows,
// as they would be after storing the batch in order: the earlier ones would
// share rows with them, and the dispatch's writes have no order.
//
// With ROPE the rows are keys of kvDim/headDim heads, rotated (rope.glsl) on
// their way into the cache: one dispatch and one barrier fewer than rotating
// them in place first. Each value is rotated on its own (in the NeoX layout
// a value and its partner are not neighbours, and the cache packs
// neighbours), so the angle is computed twice per pair.
//
// The cache holds a region of ctx rows per sequence, sequence s's ring in
// rows s*ctx .. s*ctx+ctx-1: the rows are of sequence seq (the step
// binding's second word). With ROWS they are one token each of distinct
// sequences (the server's batched decode): the step binding is then a
// (position, sequence) pair per row, and row i goes to row p mod ctx of
// its own sequence's region.
#extension GL_GOOGLE_include_directive : require

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;
layout(constant_id = 1) const bool ROPE = false;
layout(constant_id = 2) const bool NEOX = false;
layout(constant_id = 3) const bool FREQ_FACTORS = false;
layout(constant_id = 4) const bool ROWS = false;

layout(binding = 0) writeonly buffer Cache { uint cache[]; }; // f16 pairs
layout(binding = 1) readonly buffer Src { vec2 src[]; };
layout(binding = 1) readonly buffer SrcF { float srcf[]; };
layout(binding = 2) readonly buffer Step { uint pos; uint seq; };
layout(binding = 2) readonly buffer Rows { uvec2 rows[]; }; // ROWS: (position, sequence) per row
layout(binding = 3) readonly buffer Factors { float ff[]; }; // bound to a dummy unless FREQ_FACTORS

layout(push_constant) uniform Push {
    uint n;
    uint pairs; // kvDim / 2
    uint ctx;   // rows of the cache: the ring's slots
    // ROPE only:
    uint headDim;
    uint ropeDims;
    float log2Base;
    float freqScale;
} pc;

#include "rope.glsl"

// position is row i's position.
uint position(uint i) {
    return ROWS ? rows[i].x : pos + i;
}

// rotated returns value e of row i after the rotation of its head.
float rotated(uint i, uint e) {
    uint head = e / pc.headDim, d = e % pc.headDim;
    uint base = i * 2u * pc.pairs + head * pc.headDim;
    if (d >= pc.ropeDims) {
        return srcf[base + d];
    }
    uint r = rope_index(d, pc.ropeDims, NEOX);
    vec2 cs = rope_cos_sin(r, pc.ropeDims, float(position(i)), pc.log2Base, pc.freqScale, FREQ_FACTORS ? ff[r] : 1.0);
    return rope_rotate(srcf[base + d], srcf[base + rope_partner(d, pc.ropeDims, NEOX)], rope_first(d, pc.ropeDims, NEOX), cs);
}

void main() {
    uint g = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * WG + gl_LocalInvocationID.x;
    if (g >= pc.n * pc.pairs) {
        return;
    }
    uint i = g / pc.pairs, j = g % pc.pairs;
    // Rows of distinct sequences never share a slot; consecutive ones do
    // once the batch outruns the ring.
    if (ROWS || i + pc.ctx >= pc.n) {
        vec2 v = ROPE ? vec2(rotated(i, 2u * j), rotated(i, 2u * j + 1u)) : src[g];
        uint region = (ROWS ? rows[i].y : seq) * pc.ctx;
        cache[(region + position(i) % pc.ctx) * pc.pairs + j] = packHalf2x16(v);
    }
}
