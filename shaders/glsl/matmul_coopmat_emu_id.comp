#version 450
// matmul_coopmat_id.comp against coopmat.glsl's software emulation: what
// CI runs the gathered product's logic with.
#extension GL_GOOGLE_include_directive : require
#define COOPMAT_EMULATE
#define MOE_ID
#include "matmul_coopmat.glsl"
