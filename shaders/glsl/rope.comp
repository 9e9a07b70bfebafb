#version 450
// rope: rotary position embedding of x [n][heads][headDim], row i at
// position pos + i (pos from the step buffer, so a recorded sequence replays
// for every token). One invocation per pair of values; dst may alias x.
// The rotation is rope.glsl's; values past ropeDims are copied unchanged.
// With ROWS the step binding is a table of (position, sequence) per row and
// row i is at its own position (one token each of several sequences).
#extension GL_GOOGLE_include_directive : require

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;
layout(constant_id = 1) const bool NEOX = false;
layout(constant_id = 2) const bool FREQ_FACTORS = false;
layout(constant_id = 3) const bool ROWS = false;

layout(binding = 0) writeonly buffer Dst { float dst[]; };
layout(binding = 1) readonly buffer Src { float x[]; };
layout(binding = 2) readonly buffer Step { uint pos; };
layout(binding = 2) readonly buffer Rows { uvec2 rows[]; }; // ROWS: (position, sequence) per row
layout(binding = 3) readonly buffer Factors { float ff[]; }; // bound to a dummy unless FREQ_FACTORS

#include "rope.glsl"

layout(push_constant) uniform Push {
    uint pairs;    // n * heads * headDim / 2
    uint headDim;
    uint ropeDims; // even, <= headDim
    uint heads;
    float log2Base; // log2(freq base)
    float freqScale;
} pc;

void main() {
    uint g = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * WG + gl_LocalInvocationID.x;
    if (g >= pc.pairs) {
        return;
    }
    uint i = g % (pc.headDim / 2u);
    uint head = g / (pc.headDim / 2u); // counts heads of all rows: row = head / heads
    uint base = head * pc.headDim;
    uint a = 2u * i, b = a + 1u;
    if (a >= pc.ropeDims) {
        dst[base + a] = x[base + a];
        dst[base + b] = x[base + b];
        return;
    }
    if (NEOX) {
        a = i;
        b = i + pc.ropeDims / 2u;
    }
    uint row = head / pc.heads;
    vec2 cs = rope_cos_sin(i, pc.ropeDims, float(ROWS ? rows[row].x : pos + row), pc.log2Base, pc.freqScale,
                           FREQ_FACTORS ? ff[i] : 1.0);
    float x0 = x[base + a], x1 = x[base + b];
    dst[base + a] = rope_rotate(x0, x1, true, cs);
    dst[base + b] = rope_rotate(x1, x0, false, cs);
}
