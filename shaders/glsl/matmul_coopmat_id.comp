#version 450
// MOE_ID: the gathered product of a mixture-of-experts prefill
// (matmul_coopmat.glsl, matmul_cols.glsl) on the device's matrix units.
#extension GL_GOOGLE_include_directive : require
#define MOE_ID
#include "matmul_coopmat.glsl"
