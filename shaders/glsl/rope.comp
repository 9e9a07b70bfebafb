#version 450
// rope: rotary position embedding of x [n][heads][headDim], row i at
// position pos + i (pos from the step buffer, so a recorded sequence replays
// for every token). One invocation per pair of values; dst may alias x.
//
// Pair i < ropeDims/2 rotates by theta = position * freqScale *
// base^(-2i/ropeDims) / freqFactor[i]: values (2i, 2i+1) in the normal
// layout, (i, i + ropeDims/2) in the NeoX layout. Values past ropeDims are
// copied unchanged.

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;
layout(constant_id = 1) const bool NEOX = false;
layout(constant_id = 2) const bool FREQ_FACTORS = false;

layout(binding = 0) writeonly buffer Dst { float dst[]; };
layout(binding = 1) readonly buffer Src { float x[]; };
layout(binding = 2) readonly buffer Step { uint pos; };
layout(binding = 3) readonly buffer Factors { float ff[]; }; // bound to a dummy unless FREQ_FACTORS

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
    float invFreq = pc.freqScale * exp2(-pc.log2Base * float(2u * i) / float(pc.ropeDims));
    if (FREQ_FACTORS) {
        invFreq /= ff[i];
    }
    float theta = float(pos + head / pc.heads) * invFreq;
    // Reduce theta to [0, 2pi) before sin/cos: GPU sin/cos are only accurate
    // on a small range and theta reaches 1e5 at long context. 2pi is split
    // (Cody-Waite) so that k * C1 is exact for k < 2^15.
    const float C1 = 6.28125;
    const float C2 = 1.9353071795864769e-3;
    float k = floor(theta * 0.15915494309189535);
    theta = (theta - k * C1) - k * C2;
    float c = cos(theta), s = sin(theta);
    float x0 = x[base + a], x1 = x[base + b];
    dst[base + a] = x0 * c - x1 * s;
    dst[base + b] = x0 * s + x1 * c;
}
