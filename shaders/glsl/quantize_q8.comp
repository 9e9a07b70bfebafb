#version 450
// quantize_q8: rounds f32 activations to 8 bits for matvec_q8, in blocks of
// 32 values with one f32 scale each (ggml's Q8_0 in layout, with a f32
// scale): d = max|x| / 127 and q = round(x / d), so every q is in
// [-127, 127] and |x - d*q| <= d/2. x is NCOLS rows of K values, K a
// multiple of 32, which makes the rows one run of blocks; block i's
// values become words 8i..8i+7 of dst, its scale word blocks*8 + i.
// One invocation per block: the pass is a few microseconds of a decode
// step, dominated by its dispatch.

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;

layout(binding = 0) writeonly buffer Dst { uint dst[]; };
layout(binding = 0) writeonly buffer DstF { float dstf[]; };
layout(binding = 1) readonly buffer X { vec4 x4[]; };

layout(push_constant) uniform Push {
    uint blocks; // NCOLS * K / 32
} pc;

void main() {
    uint i = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * WG + gl_LocalInvocationID.x;
    if (i >= pc.blocks) {
        return;
    }
    vec4 v[8];
    float amax = 0.0;
    for (uint j = 0u; j < 8u; j++) {
        v[j] = x4[8u * i + j];
        vec4 a = abs(v[j]);
        amax = max(amax, max(max(a.x, a.y), max(a.z, a.w)));
    }
    float d = amax / 127.0;
    float id = amax > 0.0 ? 127.0 / amax : 0.0;
    for (uint j = 0u; j < 8u; j++) {
        // Rounding may land a hair past 127 when x*id is 127.0000x.
        ivec4 q = clamp(ivec4(roundEven(v[j] * id)), -127, 127);
        uvec4 b = uvec4(q) & 0xFFu;
        dst[8u * i + j] = b.x | (b.y << 8) | (b.z << 16) | (b.w << 24);
    }
    dstf[8u * pc.blocks + i] = d;
}
