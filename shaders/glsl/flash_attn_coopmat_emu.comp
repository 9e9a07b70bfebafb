#version 450
// flash_attn_coopmat.glsl built against coopmat.glsl's software emulation
// of the cooperative-matrix operations, for devices without the extension:
// what CI runs the kernel's logic with.
#extension GL_GOOGLE_include_directive : require
#define COOPMAT_EMULATE
#include "flash_attn_coopmat.glsl"
