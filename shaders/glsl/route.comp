#version 450
// route: a mixture of experts' router top-k (route.glsl), one workgroup per
// token, over logits a product wrote before. It runs on the device so that
// matvec_id reads the ids where they are: no round trip through the host
// inside a token. Decode takes router.comp instead, which computes the
// logits too, in one dependent dispatch instead of two.
//
// PARTS: the product came in parts of K (router_parts.comp, a prefill
// batch's router); the workgroup first sums its token's parts in their
// order, times the RMS norm's factor of the token's residual x where RMS
// (h = x / sqrt(mean x² + eps) · g, the weight g already applied to the
// parts), and writes the logits itself.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_memory_scope_semantics : require

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;
layout(constant_id = 1) const uint MAXE = 1024; // experts (the Go side passes E)
layout(constant_id = 2) const bool NORM = true;
layout(constant_id = 3) const uint SGMIN = 32; // the narrowest subgroup the device runs
layout(constant_id = 4) const bool PARTS = false;
layout(constant_id = 5) const bool RMS = false;

// Written here with PARTS, then read by the workgroup's first subgroup.
layout(binding = 0) coherent buffer Logits { float logits[]; };
layout(binding = 1) writeonly buffer Ids { float ids[]; };
layout(binding = 2) writeonly buffer Weights { float weights[]; };
layout(binding = 3) readonly buffer Parts { float parts[]; }; // [nparts][rows][E], with PARTS
layout(binding = 4) readonly buffer X { vec4 x4[]; };         // [rows][K4], with RMS

layout(push_constant) uniform Push {
    uint rows;   // tokens
    uint E;      // experts, <= MAXE
    uint k;      // experts chosen per token, <= E
    uint nparts; // with PARTS
    uint K4;     // vec4s of a row of x, with RMS
    float eps;   // with RMS
} pc;

#include "route.glsl"

// The sum of squares of the RMS factor, across the workgroup.
const uint NSG = (WG + SGMIN - 1u) / SGMIN;
#define RED_N 1u
#include "reduce.glsl"

void main() {
    uint row = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (row >= pc.rows) {
        return; // the whole workgroup
    }
    if (PARTS) {
        float scale = 1.0;
        if (RMS) {
            float ss = 0.0;
            for (uint i = gl_LocalInvocationIndex; i < pc.K4; i += WG) {
                vec4 v = x4[row * pc.K4 + i];
                ss += dot(v, v);
            }
            red_v[0] = ss;
            wg_reduce(false);
            scale = inversesqrt(red_v[0] / float(4u * pc.K4) + pc.eps);
        }
        for (uint e = gl_LocalInvocationIndex; e < pc.E; e += WG) {
            float s = 0.0;
            for (uint p = 0u; p < pc.nparts; p++) {
                s += parts[(p * pc.rows + row) * pc.E + e];
            }
            logits[row * pc.E + e] = s * scale;
        }
        // The logits are out; the first subgroup reads them all.
        controlBarrier(gl_ScopeWorkgroup, gl_ScopeWorkgroup, gl_StorageSemanticsBuffer | gl_StorageSemanticsShared,
                       gl_SemanticsAcquireRelease);
    }
    if (gl_SubgroupID != 0u) {
        return; // the top-k is the first subgroup's alone
    }
    route_row(row);
}
