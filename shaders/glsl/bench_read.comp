#version 450
// Read yardstick (vk/flashattn BenchmarkKVRead): reads two buffers of n
// 16-byte words each (a layer's K and V caches) once, as fast as a kernel
// can, and writes one word per workgroup so the reads are not optimised
// away. Each lane keeps ITEMS loads of each buffer in flight, a grid-stride
// apart, so every step of a workgroup reads contiguous spans. Decode
// attention reads the same bytes; this is the floor it is compared with.
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint ITEMS = 8;

layout(std430, binding = 0) readonly buffer A { uvec4 a[]; };
layout(std430, binding = 1) readonly buffer B { uvec4 b[]; };
layout(std430, binding = 2) writeonly buffer Out { uvec4 sink[]; };

layout(push_constant) uniform Push {
    uint n; // 16-byte words in each buffer
} pc;

void main() {
    const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    uvec4 acc = uvec4(0u);
    for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += ITEMS * stride) {
        uvec4 v[2 * ITEMS];
        [[unroll]] for (uint k = 0u; k < ITEMS; k++) {
            const uint j = min(i + k * stride, pc.n - 1u);
            v[k] = a[j];
            v[k + ITEMS] = b[j];
        }
        [[unroll]] for (uint k = 0u; k < 2u * ITEMS; k++) {
            acc ^= v[k];
        }
    }
    // Almost never true, but the compiler cannot know: the loads stay.
    if (acc.x == 0x9e3779b9u && acc.y == 0x7f4a7c15u) {
        sink[gl_WorkGroupID.x] = acc;
    }
}
