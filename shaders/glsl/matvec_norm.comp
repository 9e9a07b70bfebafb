#version 450
#extension GL_GOOGLE_include_directive : require
// NORM: the product with its residual, then the RMS norm of the whole
// result (matvec_norm.glsl), on f32 activations.
#define NORM
#include "matvec.glsl"
