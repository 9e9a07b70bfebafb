#version 450
#extension GL_GOOGLE_include_directive : require
// MOE_ID: the gathered product of a mixture-of-experts prefill
// (matmul.glsl, matmul_cols.glsl).
#define MOE_ID
#include "matmul.glsl"
