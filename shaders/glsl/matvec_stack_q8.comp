#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_spirv_intrinsics : require
// STACK (matvec_stack.glsl) with Q8X: 8-bit activations in packed integer
// dot products (see matvec.glsl).
#define STACK
#define Q8X
#include "dot4.glsl"
#include "matvec.glsl"
