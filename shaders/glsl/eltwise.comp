#version 450
// eltwise: dst[r][c] = op(a[r][c], b[r][c]) over a rows x cols region, each
// operand with its own row stride (in floats). A b stride of 0 broadcasts one
// row of b (bias add); strides also let copy cut columns out of wider rows.
// dst may alias a or b: each invocation reads and writes one element.

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;
layout(constant_id = 1) const uint OP = 0;

const uint OP_ADD = 0u;    // a + b
const uint OP_SWIGLU = 1u; // silu(a) * b
const uint OP_COPY = 2u;   // a (b is not read)

layout(binding = 0) writeonly buffer Dst { float dst[]; };
layout(binding = 1) readonly buffer A { float a[]; };
layout(binding = 2) readonly buffer B { float b[]; };

layout(push_constant) uniform Push {
    uint rows;
    uint cols;
    uint dstStride;
    uint aStride;
    uint bStride;
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
    } else {
        float vb = b[r * pc.bStride + c];
        // silu(x) = x / (1 + e^-x); for very negative x the exp overflows to
        // +inf and the quotient is the correct -0.
        v = OP == OP_ADD ? va + vb : va / (1.0 + exp(-va)) * vb;
    }
    dst[r * pc.dstStride + c] = v;
}
