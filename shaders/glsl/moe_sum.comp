#version 450
// moe_sum: dst[i][c] = (sum_j w[i][j] * y[i*k+j][c]) + r[i][c], the
// experts' outputs y mixed by the router's weights and added to the
// residual r, in llama.cpp's order (the products summed in slot order,
// then the residual). dst may be r: each invocation reads and writes one
// element.

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;

layout(binding = 0) writeonly buffer Dst { float dst[]; };
layout(binding = 1) readonly buffer Y { float y[]; };
layout(binding = 2) readonly buffer W { float w[]; };
layout(binding = 3) readonly buffer R { float r[]; };

layout(push_constant) uniform Push {
    uint rows; // tokens
    uint cols; // values per row
    uint k;    // slots per token
} pc;

void main() {
    uint g = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * WG + gl_LocalInvocationID.x;
    if (g >= pc.rows * pc.cols) {
        return;
    }
    uint i = g / pc.cols, c = g % pc.cols;
    // precise: each product rounded before it is added, as the reference
    // (and llama.cpp's separate mul and add) rounds it.
    precise float s = 0.0;
    for (uint j = 0u; j < pc.k; j++) {
        precise float prod = w[i * pc.k + j] * y[(i * pc.k + j) * pc.cols + c];
        s += prod;
    }
    dst[g] = s + r[g];
}
