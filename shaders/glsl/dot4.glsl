// dot4.glsl: sdot4, the sum of the products of the four signed bytes of a
// and b in one instruction (SPIR-V OpSDot on packed 4x8-bit vectors, which
// glslang names no built-in for). Included only by modules created on
// devices with the integer dot product feature: declaring it adds the
// capability to the module. Needs GL_EXT_spirv_intrinsics.
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int sdot4_packed(uint a, uint b, spirv_literal int packedFormat);
int sdot4(uint a, uint b) { return sdot4_packed(a, b, 0); }
