#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_spirv_intrinsics : require
// MOE_ID with MOE_SUM (matvec_id.glsl) and Q8X: 8-bit activations in packed
// integer dot products (see matvec.glsl).
#define MOE_ID
#define MOE_SUM
#define Q8X
#include "dot4.glsl"
#include "matvec.glsl"
