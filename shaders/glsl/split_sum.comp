#version 450
// split_sum: dst[i] = sum over s < splits of part[s·n + i], plus r[i]
// with RESID: the partial products of a matmul_coopmat split along K
// (KSPLIT), added in a fixed order, so that a result does not depend on
// which split finished first. dst may be r.
layout(local_size_x = 256) in;
layout(constant_id = 0) const bool RESID = false;

layout(binding = 0) buffer Dst { float dst[]; };
layout(binding = 1) readonly buffer Part { float part[]; };
layout(binding = 2) readonly buffer R { float res[]; };

layout(push_constant) uniform Push {
    uint n;      // values of one partial (and of dst)
    uint splits; // partials
} pc;

void main() {
    uint i = gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 256u + gl_GlobalInvocationID.x;
    if (i >= pc.n) {
        return;
    }
    float v = part[i];
    for (uint s = 1u; s < pc.splits; s++) {
        v += part[s * pc.n + i];
    }
    dst[i] = v + (RESID ? res[i] : 0.0);
}
