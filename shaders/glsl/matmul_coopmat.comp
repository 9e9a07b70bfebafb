#version 450
// The cooperative-matrix prefill product (matmul_coopmat.glsl) on the
// device's matrix units.
#extension GL_GOOGLE_include_directive : require
#include "matmul_coopmat.glsl"
