#version 450
// Bandwidth yardstick (vk/kernels BenchmarkCopyShader): dst = src in 16-byte
// words, each invocation copying ITEMS words a grid-stride apart so that every
// step of a workgroup reads and writes one contiguous span. vkCmdCopyBuffer
// measured only 0.84 TB/s on an H200, far below its HBM, so the decode
// kernels are compared with this too.
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint ITEMS = 4;

layout(std430, set = 0, binding = 0) writeonly buffer Dst { uvec4 dst[]; };
layout(std430, set = 0, binding = 1) readonly buffer Src { uvec4 src[]; };

layout(push_constant) uniform Push {
    uint n; // 16-byte words
} pc;

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    uint i = gl_GlobalInvocationID.x;
    uvec4 v[ITEMS];
    for (uint k = 0u; k < ITEMS; k++) {
        uint j = i + k * stride;
        v[k] = j < pc.n ? src[j] : uvec4(0u);
    }
    for (uint k = 0u; k < ITEMS; k++) {
        uint j = i + k * stride;
        if (j < pc.n) {
            dst[j] = v[k];
        }
    }
}
