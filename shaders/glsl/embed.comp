#version 450
// embed: dst[i] = dequant(table[tokens[i]]), one row of `cols` values per token.
// Grid: x covers the row's 16-value pieces, y the tokens.
#extension GL_GOOGLE_include_directive : require

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;
layout(constant_id = 1) const uint QTYPE = 12;

layout(binding = 0) writeonly buffer Dst { vec4 dst4[]; };
layout(binding = 1) readonly buffer Wts { uint W[]; };
layout(binding = 2) readonly buffer Tokens { int tokens[]; };

layout(push_constant) uniform Push {
    uint cols;     // values per row
    uint rowBytes; // bytes per table row
    uint vocab;    // table rows
} pc;

#include "dequant.glsl"

void main() {
    uint i = gl_WorkGroupID.y;
    uint it = gl_WorkGroupID.x * WG + gl_LocalInvocationID.x;
    uint blk = it / QPIECES, p = it % QPIECES;
    uint k0 = blk * QK;
    if (k0 >= pc.cols) {
        return;
    }
    int tok = tokens[i];
    vec4 v[4] = vec4[4](vec4(0.0), vec4(0.0), vec4(0.0), vec4(0.0));
    // An id outside the table yields a zero row rather than a stray read.
    if (tok >= 0 && uint(tok) < pc.vocab) {
        dq_piece(uint(tok) * pc.rowBytes + blk * QBYTES, p, pc.cols - k0, v);
    }
    for (uint j = 0u; j < 4u; j++) {
        uint k = k0 + dq_off(p, j);
        if (QFLOAT && k >= pc.cols) {
            break;
        }
        dst4[(i * pc.cols + k) >> 2] = v[j];
    }
}
