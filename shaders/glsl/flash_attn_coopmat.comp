#version 450
// Prefill flash attention (flash_attn_coopmat.glsl) on the device's matrix
// units.
#extension GL_GOOGLE_include_directive : require
#include "flash_attn_coopmat.glsl"
