#version 450
// route: a mixture of experts' router top-k (route.glsl), one workgroup per
// token, over logits a product wrote before. It runs on the device so that
// matvec_id reads the ids where they are: no round trip through the host
// inside a token. Decode takes router.comp instead, which computes the
// logits too, in one dependent dispatch instead of two.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;
layout(constant_id = 1) const uint MAXE = 1024; // experts (the Go side passes E)
layout(constant_id = 2) const bool NORM = true;
layout(constant_id = 3) const uint SGMIN = 32; // the narrowest subgroup the device runs

layout(binding = 0) readonly buffer Logits { float logits[]; };
layout(binding = 1) writeonly buffer Ids { float ids[]; };
layout(binding = 2) writeonly buffer Weights { float weights[]; };

layout(push_constant) uniform Push {
    uint rows; // tokens
    uint E;    // experts, <= MAXE
    uint k;    // experts chosen per token, <= E
} pc;

#include "route.glsl"

void main() {
    uint row = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (row >= pc.rows || gl_SubgroupID != 0u) {
        return; // the top-k is the first subgroup's alone
    }
    route_row(row);
}
