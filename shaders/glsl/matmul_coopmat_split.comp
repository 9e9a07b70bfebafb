#version 450
// The cooperative-matrix product (matmul_coopmat.glsl) with K in parts,
// on the device's matrix units.
#extension GL_GOOGLE_include_directive : require
#define COOP_SPLIT
#include "matmul_coopmat.glsl"
