#version 450
// kv_store: writes n f32 rows of kvDim values into the f16 cache
// [context][kvDim] at rows pos..pos+n-1 (pos from the step buffer). One
// invocation per pair of values. Rows past the context are dropped instead of
// written out of bounds; keeping pos + n within the context is the caller's job.

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;

layout(binding = 0) writeonly buffer Cache { uint cache[]; }; // f16 pairs
layout(binding = 1) readonly buffer Src { vec2 src[]; };
layout(binding = 2) readonly buffer Step { uint pos; };

layout(push_constant) uniform Push {
    uint n;
    uint pairs; // kvDim / 2
    uint ctx;   // rows of the cache
} pc;

void main() {
    uint g = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * WG + gl_LocalInvocationID.x;
    if (g >= pc.n * pc.pairs) {
        return;
    }
    uint i = g / pc.pairs, j = g % pc.pairs;
    uint p = pos + i;
    if (p < pc.ctx) {
        cache[p * pc.pairs + j] = packHalf2x16(src[g]);
    }
}
