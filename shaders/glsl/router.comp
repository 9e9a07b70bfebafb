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
// The norm's factor is one number a token, so the loop that reads x sums
// its squares beside the products of x·g, and the factor scales the sums
// after: one pass over x and one reduction, not a pass for the norm and a
// barrier before the product's. The last workgroup's first subgroup routes
// the token (route.glsl).
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_memory_scope_semantics : require

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;
layout(constant_id = 1) const uint MAXE = 1024; // experts (the Go side passes E)
layout(constant_id = 2) const bool NORM = true;
layout(constant_id = 3) const uint RW = 4; // experts per workgroup
layout(constant_id = 4) const bool RMS = false;
layout(constant_id = 5) const uint SGMIN = 32; // the narrowest subgroup the device runs
const uint TRIP = RW <= 4u ? 2u : 1u;          // vec4s of the row a lane loads at once

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

    // Experts past E repeat the last (computed, never written), so the
    // loop needs no branch around its loads.
    float acc[RW];
    [[unroll]] for (uint r = 0u; r < RW; r++) {
        acc[r] = 0.0;
    }
    // TRIP vec4s of the row a lane and trip, all their loads issued before
    // any product: Qwen3-30B-A3B's 2048 values are one trip of 256 lanes in
    // decode. Prefill's 16 experts a workgroup take one vec4 a trip: two
    // held 32 vec4s of weights a lane (256 VGPRs on polaris10).
    float ss = 0.0;
    for (uint i0 = lane; i0 < pc.K4; i0 += TRIP * WG) {
        vec4 v[TRIP];
        vec4 wv[TRIP][RW];
        [[unroll]] for (uint h = 0u; h < TRIP; h++) {
            // Past the row the last vec4 repeats, with no weight.
            uint i = min(i0 + h * WG, pc.K4 - 1u);
            v[h] = i0 + h * WG < pc.K4 ? x4[xb + i] : vec4(0.0);
            [[unroll]] for (uint r = 0u; r < RW; r++) {
                wv[h][r] = w4[min(e0 + r, pc.E - 1u) * pc.K4 + i];
            }
        }
        [[unroll]] for (uint h = 0u; h < TRIP; h++) {
            if (RMS) {
                ss += dot(v[h], v[h]);
                v[h] *= g4[min(i0 + h * WG, pc.K4 - 1u)];
            }
            [[unroll]] for (uint r = 0u; r < RW; r++) {
                acc[r] += dot(wv[h][r], v[h]);
            }
        }
    }
    [[unroll]] for (uint r = 0u; r < RW; r++) {
        acc[r] = subgroupAdd(acc[r]);
    }
    ss = subgroupAdd(ss);
    if (subgroupElect()) {
        [[unroll]] for (uint r = 0u; r < RW; r++) {
            red[r][sg] = acc[r];
        }
        red[RW][sg] = ss;
    }
    barrier();
    if (lane == 0u) {
        float scale = 1.0;
        if (RMS) {
            ss = 0.0;
            for (uint i = 0u; i < nsg; i++) {
                ss += red[RW][i];
            }
            scale = inversesqrt(ss / float(4u * pc.K4) + pc.eps);
        }
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
    if (!last || sg != 0u) {
        return; // the top-k is subgroup 0's alone: no barrier follows
    }
    route_row(row);
    if (subgroupElect()) {
        // Every workgroup of the token has counted and none will again in
        // this dispatch; a plain store leaves the counter at zero for the
        // next one, which a barrier separates from this. (By one of the
        // subgroup that routed: which subgroup invocation 0 falls in is
        // the driver's choice.)
        counts[row] = 0u;
    }
}
