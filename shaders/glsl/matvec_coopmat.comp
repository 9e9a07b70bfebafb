#version 450
// The cooperative-matrix product for narrow batches (matvec_coopmat.glsl)
// on the device's matrix units.
#extension GL_GOOGLE_include_directive : require
#include "matvec_coopmat.glsl"
