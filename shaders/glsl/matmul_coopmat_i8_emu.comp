#version 450
// matmul_coopmat.glsl's integer variant built against coopmat.glsl's
// software emulation of the cooperative-matrix operations: what CI runs
// its logic with.
#extension GL_GOOGLE_include_directive : require
#define COOPMAT_EMULATE
#define COOP_INT8
#include "matmul_coopmat.glsl"
