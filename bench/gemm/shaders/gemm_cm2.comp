#version 450
// gemm_cm2: C[M×N] = A[M×K]·B[K×N], fp16 inputs (row-major), fp32
// accumulators and C, on VK_NV_cooperative_matrix2 workgroup-scope matrices
// loaded straight from global memory through tensor layouts
// (coopMatLoadTensorNV); the driver stages them. Benchmark kernel: M, N, K
// multiples of BM, BN, BK.
// PIPE 1 issues the loads of step k+1 before the multiply of step k.
// Bindings: 0 A, 1 B (float16_t), 2 C (float). Push: M, N, K.
// Grid: (N/BN, M/BM, 1).
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_control_flow_attributes : require

layout(local_size_x = 128, local_size_x_id = 0) in;
layout(constant_id = 1) const uint BM = 128;
layout(constant_id = 2) const uint BN = 128;
layout(constant_id = 3) const uint BK = 32;
layout(constant_id = 4) const uint PIPE = 0;

layout(push_constant) uniform P { uint M; uint N; uint K; } p;
layout(std430, binding = 0) readonly buffer ABuf { float16_t a_buf[]; };
layout(std430, binding = 1) readonly buffer BBuf { float16_t b_buf[]; };
layout(std430, binding = 2) writeonly buffer CBuf { float c_buf[]; };

void main() {
	uint m0 = gl_WorkGroupID.y * BM;
	uint n0 = gl_WorkGroupID.x * BN;
	tensorLayoutNV<2> tA = createTensorLayoutNV(2);
	tensorLayoutNV<2> tB = createTensorLayoutNV(2);
	tensorLayoutNV<2> tC = createTensorLayoutNV(2);
	tA = setTensorLayoutDimensionNV(tA, p.M, p.K);
	tB = setTensorLayoutDimensionNV(tB, p.K, p.N);
	tC = setTensorLayoutDimensionNV(tC, p.M, p.N);

	coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> c =
		coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(0.0);
	coopmat<float16_t, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA> a;
	coopmat<float16_t, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB> b;
	if (PIPE != 0u) {
		coopmat<float16_t, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA> a2;
		coopmat<float16_t, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB> b2;
		coopMatLoadTensorNV(a, a_buf, 0, sliceTensorLayoutNV(tA, m0, BM, 0, BK));
		coopMatLoadTensorNV(b, b_buf, 0, sliceTensorLayoutNV(tB, 0, BK, n0, BN));
		for (uint k = 0u; k < p.K; k += 2u * BK) {
			if (k + BK < p.K) {
				coopMatLoadTensorNV(a2, a_buf, 0, sliceTensorLayoutNV(tA, m0, BM, k + BK, BK));
				coopMatLoadTensorNV(b2, b_buf, 0, sliceTensorLayoutNV(tB, k + BK, BK, n0, BN));
			}
			c = coopMatMulAdd(a, b, c);
			if (k + BK < p.K) {
				if (k + 2u * BK < p.K) {
					coopMatLoadTensorNV(a, a_buf, 0, sliceTensorLayoutNV(tA, m0, BM, k + 2u * BK, BK));
					coopMatLoadTensorNV(b, b_buf, 0, sliceTensorLayoutNV(tB, k + 2u * BK, BK, n0, BN));
				}
				c = coopMatMulAdd(a2, b2, c);
			}
		}
	} else {
		for (uint k = 0u; k < p.K; k += BK) {
			coopMatLoadTensorNV(a, a_buf, 0, sliceTensorLayoutNV(tA, m0, BM, k, BK));
			coopMatLoadTensorNV(b, b_buf, 0, sliceTensorLayoutNV(tB, k, BK, n0, BN));
			c = coopMatMulAdd(a, b, c);
		}
	}
	coopMatStoreTensorNV(c, c_buf, 0, sliceTensorLayoutNV(tC, m0, BM, n0, BN));
}
