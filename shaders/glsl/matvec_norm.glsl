// matvec_norm.glsl: the folded variant of matvec.glsl (NORM defined;
// matvec_norm.comp and matvec_norm_q8.comp): one decode column of
// x = r + W·a, then h = x / sqrt(mean(x^2) + eps) * g, the RMS norm of the
// whole row x that the next layer's products (or the output) read, and
// with NORM_Q8 h's 8-bit copy too (q8.glsl). In decode the norm's own
// dispatch costs as much as a product that reads megabytes: its fixed
// launch, drain and barrier latency, not its 16 KB.
//
// The norm needs every row of x, which the dispatch's workgroups write.
// Each workgroup, once its lane 0 has written its rows, counts itself done
// on a counter (binding 7; device-scope acquire-release on buffer memory,
// x in a coherent binding, as matvec_stack.glsl's q8 blocks); the last of
// pc.groups to count does the norm with all its lanes and leaves the
// counter at zero for the next dispatch, which a barrier separates. One
// workgroup reads 4 * M bytes twice (sum of squares, then the scaling)
// while the others are gone: about M / WG values per lane.

#extension GL_KHR_memory_scope_semantics : require

layout(constant_id = 7) const bool NORM_Q8 = false;

layout(binding = 4) readonly buffer Gain { float gain[]; };
layout(binding = 4) readonly buffer Gain4 { vec4 gain4[]; };
// h may be x itself (the output norm, in place): every lane writes only
// values it read itself, after its own reads.
layout(binding = 5) writeonly buffer Hn { float hn[]; };
layout(binding = 5) writeonly buffer Hn4 { vec4 hn4[]; };
layout(binding = 6) writeonly buffer Q8W { uint q8w[]; };
layout(binding = 6) writeonly buffer Q8F { float q8f[]; };
layout(binding = 7) coherent buffer Counter { uint counter; };

#include "q8.glsl"

shared uint norm_last;

// norm_epilogue runs after lane 0 wrote the workgroup's rows (uniform
// control flow: every lane of every working workgroup calls it).
void norm_epilogue() {
    if (gl_LocalInvocationID.x == 0u) {
        norm_last = atomicAdd(counter, 1u, gl_ScopeDevice, gl_StorageSemanticsBuffer, gl_SemanticsAcquireRelease) ==
                    pc.groups - 1u ? 1u : 0u;
    }
    // Lane 0's acquire made every workgroup's rows visible to it; this
    // barrier passes them on to the other lanes at device scope, with
    // norm_last.
    controlBarrier(gl_ScopeWorkgroup, gl_ScopeDevice, gl_StorageSemanticsBuffer | gl_StorageSemanticsShared,
                   gl_SemanticsAcquireRelease);
    if (norm_last == 0u) {
        return; // uniform: the whole workgroup leaves
    }
    // Each lane takes the same values in both passes (whole 32-value
    // blocks with NORM_Q8, which rounds them a block at a time), so that h
    // may alias x.
    uint m = pc.M, lane = gl_LocalInvocationID.x;
    float ss = 0.0;
    if (NORM_Q8) {
        for (uint b = lane; b < m / 32u; b += WG) {
            for (uint i = 0u; i < 32u; i++) {
                float v = dst[32u * b + i];
                ss += v * v;
            }
        }
    } else {
        for (uint c = lane; c < m; c += WG) {
            float v = dst[c];
            ss += v * v;
        }
    }
    for (uint i = 0u; i < RED_N; i++) {
        red_v[i] = 0.0;
    }
    red_v[0] = ss;
    wg_reduce(false);
    float scale = inversesqrt(red_v[0] / float(m) + pc.eps);
    if (NORM_Q8) {
        for (uint b = lane; b < m / 32u; b += WG) {
            vec4 v[8];
            for (uint j = 0u; j < 8u; j++) {
                uint at = 32u * b + 4u * j;
                v[j] = vec4(dst[at], dst[at + 1u], dst[at + 2u], dst[at + 3u]) * scale * gain4[8u * b + j];
                hn4[8u * b + j] = v[j];
            }
            q8_store(b, m / 32u, v);
        }
    } else {
        for (uint c = lane; c < m; c += WG) {
            hn[c] = dst[c] * scale * gain[c];
        }
    }
    if (lane == 0u) {
        // Every workgroup has counted and none will again in this
        // dispatch.
        counter = 0u;
    }
}
