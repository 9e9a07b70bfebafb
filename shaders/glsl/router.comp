#version 450
// router: a mixture of experts' router product and its top-k in one
// dispatch, for decode. logits[row] = W · h over E experts (W F32, E × K),
// then route.glsl's top-k of softmax(logits[row]) into ids and weights.
//
// In decode the router product (1 MB for Qwen3-30B-A3B) and the top-k are
// both tiny, so each was mostly the launch and barrier of a dependent
// dispatch. Here workgroup (g, row) computes RW experts' logits of token
// row; each counts itself done on the token's counter once they are out
// (one device-scope release/acquire orders them), and the last to finish
// runs the top-k over every logit of the token and resets the counter for
// the next dispatch, as the split-k of flash_attn_decode.comp does.
//
// RMS: h is the RMS norm of the residual x with weight g (h = x / sqrt(mean
// x² + eps) · g), which every workgroup computes itself from x (K values,
// a few KB from the cache): the dispatch then reads what the norm before
// it reads, not what it writes, and runs beside it instead of after it.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_memory_scope_semantics : require

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;
layout(constant_id = 1) const uint MAXE = 1024; // most experts
layout(constant_id = 2) const bool NORM = true;
layout(constant_id = 3) const uint RW = 4; // experts per workgroup
layout(constant_id = 4) const bool RMS = false;

// logits is written by every workgroup and read back by the last.
layout(binding = 0) coherent buffer Logits { float logits[]; };
layout(binding = 1) writeonly buffer Ids { float ids[]; };
layout(binding = 2) writeonly buffer Weights { float weights[]; };
layout(binding = 3) readonly buffer W { vec4 w4[]; };   // [E][K/4]
layout(binding = 4) readonly buffer X { vec4 x4[]; };   // [rows][K/4]: h, or the residual with RMS
layout(binding = 5) readonly buffer G { vec4 g4[]; };   // [K/4], the norm's weight (RMS)
layout(binding = 6) coherent buffer Counts { uint counts[]; }; // [rows], zero between dispatches

layout(push_constant) uniform Push {
    uint rows; // tokens
    uint E;    // experts, <= MAXE
    uint k;    // experts chosen per token, <= E
    uint K4;   // vec4s per row of W and x
    float eps; // the norm's epsilon (RMS)
} pc;

#include "route.glsl"

shared float red[RW + 1u][WG]; // per subgroup: the RW sums, then the sum of squares
shared bool last;              // this workgroup finished its token's last

void main() {
    uint row = gl_WorkGroupID.y;
    uint e0 = gl_WorkGroupID.x * RW;
    uint lane = gl_LocalInvocationID.x;
    uint sg = gl_SubgroupID, nsg = gl_NumSubgroups;
    uint xb = row * pc.K4;

    float scale = 1.0;
    if (RMS) {
        float ss = 0.0;
        for (uint i = lane; i < pc.K4; i += WG) {
            vec4 v = x4[xb + i];
            ss += dot(v, v);
        }
        ss = subgroupAdd(ss);
        if (subgroupElect()) {
            red[RW][sg] = ss;
        }
        barrier();
        ss = 0.0;
        for (uint i = 0u; i < nsg; i++) {
            ss += red[RW][i];
        }
        scale = inversesqrt(ss / float(4u * pc.K4) + pc.eps);
    }

    // Experts past E repeat the last (computed, never written), so the
    // loop needs no branch around its loads.
    float acc[RW];
    [[unroll]] for (uint r = 0u; r < RW; r++) {
        acc[r] = 0.0;
    }
    for (uint i = lane; i < pc.K4; i += WG) {
        vec4 v = x4[xb + i];
        if (RMS) {
            v *= g4[i];
        }
        [[unroll]] for (uint r = 0u; r < RW; r++) {
            acc[r] += dot(w4[min(e0 + r, pc.E - 1u) * pc.K4 + i], v);
        }
    }
    [[unroll]] for (uint r = 0u; r < RW; r++) {
        acc[r] = subgroupAdd(acc[r]);
    }
    if (subgroupElect()) {
        [[unroll]] for (uint r = 0u; r < RW; r++) {
            red[r][sg] = acc[r];
        }
    }
    barrier();
    if (lane == 0u) {
        for (uint r = 0u; r < RW && e0 + r < pc.E; r++) {
            float s = 0.0;
            for (uint i = 0u; i < nsg; i++) {
                s += red[r][i];
            }
            logits[row * pc.E + e0 + r] = s * scale;
        }
    }

    // Count this workgroup done once its logits are out; the last one of
    // the token routes it.
    controlBarrier(gl_ScopeWorkgroup, gl_ScopeDevice, gl_StorageSemanticsBuffer | gl_StorageSemanticsShared,
                   gl_SemanticsAcquireRelease);
    if (lane == 0u) {
        last = atomicAdd(counts[row], 1u, gl_ScopeDevice, gl_StorageSemanticsBuffer, gl_SemanticsAcquireRelease) ==
               gl_NumWorkGroups.x - 1u;
    }
    controlBarrier(gl_ScopeWorkgroup, gl_ScopeWorkgroup, gl_StorageSemanticsBuffer | gl_StorageSemanticsShared,
                   gl_SemanticsAcquireRelease);
    if (!last) {
        return; // whole workgroup: route_row's barriers stay uniform
    }
    route_row(row);
    if (lane == 0u) {
        // Every workgroup of the token has counted and none will again in
        // this dispatch; a plain store leaves the counter at zero for the
        // next one, which a barrier separates from this.
        counts[row] = 0u;
    }
}
