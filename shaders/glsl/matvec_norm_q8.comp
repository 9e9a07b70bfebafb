#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_spirv_intrinsics : require
// NORM: the product with its residual, then the RMS norm of the whole
// result (matvec_norm.glsl), on 8-bit activations (see matvec.glsl).
#define Q8X
#define NORM
#include "dot4.glsl"
#include "matvec.glsl"
