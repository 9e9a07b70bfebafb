#version 450
// matmul_coopmat.glsl's integer variant (COOP_INT8: 8-bit activations and
// weight quants, int8 x int8 -> int32 fragments) on the device's matrix
// units.
#extension GL_GOOGLE_include_directive : require
#define COOP_INT8
#include "matmul_coopmat.glsl"
