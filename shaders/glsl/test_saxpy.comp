#version 450
// Runtime test kernel (vk/ tests): y[i] = a*x[i] + y[i] for i < n.
// The workgroup size is specialization constant 0; n and a are push constants.
layout(local_size_x_id = 0) in;

layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) buffer Y { float y[]; };

layout(push_constant) uniform Push {
    uint n;
    float a;
} pc;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < pc.n) {
        y[i] = pc.a * x[i] + y[i];
    }
}
