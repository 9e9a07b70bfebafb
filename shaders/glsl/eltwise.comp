#version 450
// eltwise: dst[r][c] = op(a[r][c], b[r][c]) over a rows x cols region, each
// operand with its own row stride (in floats). A b stride of 0 broadcasts one
// row of b (bias add); strides also let copy cut columns out of wider rows.
// dst may alias a or b: each invocation reads and writes one element.
#extension GL_GOOGLE_include_directive : require

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;
layout(constant_id = 1) const uint OP = 0;

const uint OP_ADD = 0u;    // a + b
const uint OP_SWIGLU = 1u; // silu(a) * b
const uint OP_COPY = 2u;   // a (b is not read)
const uint OP_GEGLU = 3u;  // gelu(a) * b, gelu in ggml's tanh form
const uint OP_SCALE = 4u;  // a * s (b is not read)

#include "glu.glsl"

layout(binding = 0) writeonly buffer Dst { float dst[]; };
layout(binding = 1) readonly buffer A { float a[]; };
layout(binding = 2) readonly buffer B { float b[]; };

layout(push_constant) uniform Push {
    uint rows;
    uint cols;
    uint dstStride;
    uint aStride;
    uint bStride;
    float s; // OP_SCALE's factor
} pc;

void main() {
    uint g = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * WG + gl_LocalInvocationID.x;
    if (g >= pc.rows * pc.cols) {
        return;
    }
    uint r = g / pc.cols, c = g % pc.cols;
    float va = a[r * pc.aStride + c];
    float v;
    if (OP == OP_COPY) {
        v = va;
    } else if (OP == OP_SCALE) {
        v = va * pc.s;
    } else {
        float vb = b[r * pc.bStride + c];
        if (OP == OP_ADD) {
            v = va + vb;
        } else {
            v = glu_act(OP == OP_GEGLU ? GLU_GELU : GLU_SILU, vec4(va)).x * vb;
        }
    }
    dst[r * pc.dstStride + c] = v;
}
