#version 450
// matmul_coopmat_split.comp on coopmat.glsl's software emulation (what CI
// runs the kernel's logic with).
#extension GL_GOOGLE_include_directive : require
#define COOPMAT_EMULATE
#define COOP_SPLIT
#include "matmul_coopmat.glsl"
