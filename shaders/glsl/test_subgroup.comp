#version 450
// Runtime test kernel (vk/ tests): reports the subgroup geometry the driver
// actually used, so a required subgroup size can be checked on the device.
#extension GL_KHR_shader_subgroup_basic : require
layout(local_size_x_id = 0) in;

layout(std430, set = 0, binding = 0) writeonly buffer Out { uint o[]; };

void main() {
    if (gl_LocalInvocationIndex == 0) {
        o[0] = gl_SubgroupSize;
        o[1] = gl_NumSubgroups;
    }
}
