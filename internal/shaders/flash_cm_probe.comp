#version 450
// flash_cm_probe: reports how a device distributes the elements of two
// subgroup-scope cooperative-matrix types over the invocations of a
// subgroup, so that the host can specialise flash_cm (see its header,
// "register softmax"). One workgroup of exactly one subgroup.
//
// Types probed (the shape comes from spec constants 10 CM_M, 11 CM_N,
// 12 CM_K, chosen among the device's reported shapes):
//   ACC  coopmat<float,     subgroup, CM_M, CM_N, Accumulator>
//   A    coopmat<float16_t, subgroup, CM_M, CM_K, A> (NAME.f16.spv), or
//        coopmat<bfloat16_t, …> (NAME.bf16.spv, -DSTORAGE_BF16=1, glslang
//        ≥ 16): the bf16 A layout may differ from the fp16 one, so each
//        storage type's kernels use their own probe's layout
// Binding 0 (float32, read and written): out[0] = ACC.length(), out[1] = A.length(),
//   out[2] = gl_SubgroupSize; for lane l and component i:
//   out[8 + l·64 + i]            = 256·row + col of ACC's component i,
//   out[8 + (SG + l)·64 + i]     = 32·row + col of A's component i,
//   with SG the subgroup size (the buffer needs 8 + 128·SG floats:
//   shaders.FlashCMProbeFloats).
// Spec constants: 0 workgroup size (= the subgroup size), 10–12 the shape.
// Needs VK_KHR_cooperative_matrix (SPIR-V 1.6 / Vulkan 1.3 target).
// bf16 cannot hold 32·row + col exactly past 256, so the bf16 probe loads
// the element with bits 0x3f80 + 32·row + col (a normal finite bfloat16)
// and decodes the bits; the output format is the same.
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_GOOGLE_include_directive : require
#if defined(STORAGE_BF16)
#extension GL_EXT_bfloat16 : require
#define AT bfloat16_t
#define A_ENC(x) bfloat16_t(uintBitsToFloat((0x3f80u + (x)) << 16u))
#define A_DEC(v) float((floatBitsToUint(float(v)) >> 16u) - 0x3f80u)
#else
#define AT float16_t
#define A_ENC(x) float16_t(float(x))
#define A_DEC(v) float(v)
#endif

layout(local_size_x = 32, local_size_x_id = 0) in;
layout(constant_id = 10) const uint CM_M = 16;
layout(constant_id = 11) const uint CM_N = 16;
layout(constant_id = 12) const uint CM_K = 16;

layout(std430, binding = 0) buffer Out { float outv[]; };

shared float sAcc[CM_M * CM_N];
shared AT sA[CM_M * CM_K];

void main() {
	uint lane = gl_LocalInvocationID.x;
	uint wg = gl_WorkGroupSize.x;
	for (uint e = lane; e < CM_M * CM_N; e += wg) {
		uint r = e / CM_N, c = e % CM_N;
		sAcc[e] = float(r * 256u + c);
	}
	for (uint e = lane; e < CM_M * CM_K; e += wg) {
		uint r = e / CM_K, c = e % CM_K;
		sA[e] = A_ENC(r * 32u + c);
	}
	barrier();
	coopmat<float, gl_ScopeSubgroup, CM_M, CM_N, gl_MatrixUseAccumulator> acc;
	coopmat<AT, gl_ScopeSubgroup, CM_M, CM_K, gl_MatrixUseA> a;
	coopMatLoad(acc, sAcc, 0, CM_N, gl_CooperativeMatrixLayoutRowMajor);
	coopMatLoad(a, sA, 0, CM_K, gl_CooperativeMatrixLayoutRowMajor);
	uint sg = gl_SubgroupSize;
	if (lane == 0u) {
		outv[0] = float(acc.length());
		outv[1] = float(a.length());
		outv[2] = float(sg);
	}
	for (uint i = 0u; i < uint(acc.length()) && i < 64u; ++i) {
		outv[8u + lane * 64u + i] = acc[i];
	}
	for (uint i = 0u; i < uint(a.length()) && i < 64u; ++i) {
		outv[8u + (sg + lane) * 64u + i] = A_DEC(a[i]);
	}
}
