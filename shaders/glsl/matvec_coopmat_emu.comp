#version 450
// matvec_coopmat.glsl built against coopmat.glsl's software emulation of
// the cooperative-matrix operations, for devices without the extension:
// what CI runs the kernel's logic with.
#extension GL_GOOGLE_include_directive : require
#define COOPMAT_EMULATE
#include "matvec_coopmat.glsl"
