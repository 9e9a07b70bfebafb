#version 450
#extension GL_GOOGLE_include_directive : require
// The dense prefill product (matmul.glsl).
#include "matmul.glsl"
