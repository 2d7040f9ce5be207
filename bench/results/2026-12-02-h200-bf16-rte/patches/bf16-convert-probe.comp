#version 450
// Experiment: how does the device's fp32 -> bfloat16 conversion round,
// scalar and on a cooperative matrix, with and without RoundingModeRTE?
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_bfloat16 : require
#extension GL_EXT_spirv_intrinsics : require
#if defined(RTE16)
spirv_execution_mode(capabilities = [4467], 4462, 16);
#endif
#if defined(RTE32)
spirv_execution_mode(capabilities = [4467], 4462, 32);
#endif
layout(local_size_x = 32, local_size_x_id = 0) in;
layout(constant_id = 10) const uint CM_M = 16;
layout(constant_id = 11) const uint CM_N = 16;
layout(std430, binding = 0) buffer In { float inv[]; };
layout(std430, binding = 1) buffer Out { uint outv[]; };
shared float sAcc[CM_M * CM_N];
shared bfloat16_t sB[CM_M * CM_N];
void main() {
	uint lane = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
	uint base = gl_WorkGroupID.x * CM_M * CM_N;
	uint total = gl_NumWorkGroups.x * CM_M * CM_N;
	// scalar conversion: out[0 .. total)
	for (uint e = lane; e < CM_M * CM_N; e += wg) {
		float x = inv[base + e];
		bfloat16_t b = bfloat16_t(x);
		outv[base + e] = floatBitsToUint(float(b));
		sAcc[e] = x;
	}
	barrier();
	coopmat<float, gl_ScopeSubgroup, CM_M, CM_N, gl_MatrixUseAccumulator> acc;
	coopMatLoad(acc, sAcc, 0, CM_N, gl_CooperativeMatrixLayoutRowMajor);
	coopmat<bfloat16_t, gl_ScopeSubgroup, CM_M, CM_N, gl_MatrixUseAccumulator> b16 =
		coopmat<bfloat16_t, gl_ScopeSubgroup, CM_M, CM_N, gl_MatrixUseAccumulator>(acc);
	coopMatStore(b16, sB, 0, CM_N, gl_CooperativeMatrixLayoutRowMajor);
	barrier();
	for (uint e = lane; e < CM_M * CM_N; e += wg) {
		outv[total + base + e] = floatBitsToUint(float(sB[e]));
	}
	// per-element conversion of the accumulator's components
	coopmat<bfloat16_t, gl_ScopeSubgroup, CM_M, CM_N, gl_MatrixUseAccumulator> c16;
	for (int i = 0; i < acc.length(); i++) {
		c16[i] = bfloat16_t(acc[i]);
	}
	barrier();
	coopMatStore(c16, sB, 0, CM_N, gl_CooperativeMatrixLayoutRowMajor);
	barrier();
	for (uint e = lane; e < CM_M * CM_N; e += wg) {
		outv[2u * total + base + e] = floatBitsToUint(float(sB[e]));
	}
}
