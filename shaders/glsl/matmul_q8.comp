#version 450
#extension GL_GOOGLE_include_directive : require
// The dense prefill product (matmul_q8.glsl).
#include "matmul_q8.glsl"
