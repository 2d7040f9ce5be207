// params.glsl: the one include shared by every flashvk kernel.
//
// It declares the push-constant block (mirrored field for field by
// shaders.Params in params.go; params_test.go checks the offsets against
// the compiled SPIR-V), the specialization constants, the storage type and
// the helpers every kernel uses: masking (key_limit / query_first), row base
// offsets and LSE/D indexing.
//
// Compile-time defines: STORAGE_F16 (set by the build for NAME.f16.spv)
// makes the Q/K/V/O/dO/dQ/dK/dV buffers float16_t, STORAGE_BF16 (for
// NAME.bf16.spv) uint16_t holding bfloat16 bits; otherwise float. LSE, D and
// scratch are always float32, and all math is fp32.
//
// Conventions (internal/spec): Q [B,Nq,Hq,D], K [B,Nk,Hkv,D], V [B,Nk,Hkv,DV],
// O/dO [B,Nq,Hq,DV] through element strides (batch, seq, head), feature
// stride 1; dQ has Q's strides, dK K's, dV V's; LSE and D are contiguous
// [B,Hq,Nq]; query head h reads key/value head h / group.

#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_control_flow_attributes : require

// Storage type STYPE of the Q/K/V/O/dO/dQ/dK/dV buffers; kernels read them
// only through LOAD (STYPE → float, exact) and write them only through
// STORE (float → STYPE, round to nearest even).
#if defined(STORAGE_F16)
#define STYPE float16_t
#define LOAD(x) float(x)
#define STORE(x) float16_t(x)
#elif defined(STORAGE_BF16)
// bfloat16 as raw uint16_t bits (16-bit storage only; no bfloat16 GLSL
// type): a load shifts the bits into the top of a float32 (exact), a store
// rounds to nearest even in integer arithmetic (bf16_round); the only
// 16-bit operations are loads, stores and conversions, so the modules need
// storageBuffer16BitAccess and no shaderInt16.
#define STYPE uint16_t
#define LOAD(x) uintBitsToFloat(uint(x) << 16)
#define STORE(x) uint16_t(bf16_round(x))
#else
#define STYPE float
#define LOAD(x) float(x)
#define STORE(x) float(x)
#endif

#ifdef STORAGE_BF16
// bf16_round returns the bits (in the low 16) of the bfloat16 nearest to x,
// ties to even: overflow carries into the exponent and gives ±Inf, NaN
// stays NaN (made quiet, sign kept) — bfloat16.FromFloat32 on the host does
// the same. It returns a uint, not a uint16_t: a 16-bit return value would
// need the Int16 capability.
uint bf16_round(float x) {
	uint u = floatBitsToUint(x);
	if ((u & 0x7fffffffu) > 0x7f800000u) {
		return (u >> 16) | 0x40u;
	}
	u += 0x7fffu + ((u >> 16) & 1u);
	return u >> 16;
}
#endif

// Push constants: 20 × 4 = 80 bytes (the Vulkan minimum is 128).
layout(push_constant) uniform Params {
	uint B; uint Hq; uint Hkv; uint Nq; uint Nk;
	uint q_b; uint q_s; uint q_h;   // element strides (batch, seq, head); feature stride 1
	uint k_b; uint k_s; uint k_h;
	uint v_b; uint v_s; uint v_h;
	uint o_b; uint o_s; uint o_h;   // O and dO
	float scale;                    // softmax scale (resolved, never 0)
	uint mask;                      // 0 none, 1 causal top-left, 2 causal bottom-right
	uint group;                     // Hq / Hkv
} pc;

// Specialization constants, shared ids (shaders/embed.go mirrors them):
//   0 workgroup size (local_size_x), 1 D, 2 DV, 3 BR, 4 BC, 5 SUBGROUP.
// Kernels may ignore some; naive adds 6 PASS.
layout(local_size_x = 64, local_size_x_id = 0) in;
layout(constant_id = 1) const uint D = 64;        // head dim of Q and K
layout(constant_id = 2) const uint DV = 64;       // head dim of V and O
layout(constant_id = 3) const uint BR = 16;       // query rows per workgroup tile
layout(constant_id = 4) const uint BC = 16;       // key rows per tile
layout(constant_id = 5) const uint SUBGROUP = 32; // the device's subgroup size

#define WG (gl_WorkGroupSize.x)

const float LOG2E = 1.4426950408889634;
const float LN2 = 0.6931471805599453;
#define NEG_INF uintBitsToFloat(0xff800000u)

#define MASK_NONE 0u
#define MASK_CAUSAL_TL 1u
#define MASK_CAUSAL_BR 2u

// key_limit mirrors spec.Problem.KeyLimit: query row i sees keys
// 0 … key_limit(i)−1; 0 for a row that sees no key, Nk when unmasked.
uint key_limit(uint i) {
	if (pc.mask == MASK_CAUSAL_TL) {
		return min(i + 1u, pc.Nk);
	}
	if (pc.mask == MASK_CAUSAL_BR) {
		int lim = int(i) + 1 + int(pc.Nk) - int(pc.Nq);
		return uint(clamp(lim, 0, int(pc.Nk)));
	}
	return pc.Nk;
}

// query_first returns the first query row that sees key j (key_limit is
// non-decreasing in i, so rows query_first(j) … Nq−1 see it); it may be ≥ Nq
// when no row sees key j.
uint query_first(uint j) {
	if (pc.mask == MASK_CAUSAL_TL) {
		return j;
	}
	if (pc.mask == MASK_CAUSAL_BR) {
		int f = int(j) + int(pc.Nq) - int(pc.Nk);
		return uint(max(f, 0));
	}
	return 0u;
}

// Row base offsets (element index of feature 0 of row (b, s, h)), one
// function per operand. Varlen (packed sequences through cu_seqlens) will
// later replace the batch term b*stride_b (and the sequence lengths) here,
// in this one place per operand; kernels never compute offsets themselves.
// Offsets are 32-bit: each operand's binding must hold < 2^32 elements.
uint q_base(uint b, uint s, uint h) { return b * pc.q_b + s * pc.q_s + h * pc.q_h; }
uint k_base(uint b, uint s, uint h) { return b * pc.k_b + s * pc.k_s + h * pc.k_h; }
uint v_base(uint b, uint s, uint h) { return b * pc.v_b + s * pc.v_s + h * pc.v_h; }
// O and dO share O's strides (dQ uses q_base, dK k_base, dV v_base).
uint o_base(uint b, uint s, uint h) { return b * pc.o_b + s * pc.o_s + h * pc.o_h; }
// Index of row (b, h, i) in LSE and D (contiguous [B, Hq, Nq]).
uint lse_index(uint b, uint h, uint i) { return (b * pc.Hq + h) * pc.Nq + i; }

// kv_head maps a query head to the key/value head it reads (GQA).
uint kv_head(uint h) { return h / pc.group; }

// thread_index numbers the workgroup's invocations subgroup by subgroup, so
// that invocations t … t+n−1 with t a multiple of n ≤ SUBGROUP (n a power of
// two) lie in one subgroup whatever order the implementation assigns
// invocations to subgroups in. Requires the workgroup size to be a multiple
// of the subgroup size (full subgroups).
uint thread_index() { return gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID; }

// Loop budget. lavapipe (gallivm) silently ends every loop of an invocation
// once the invocation has run 65535 loop iterations in total, all loops
// together (LP_MAX_TGSI_LOOP_ITERATIONS), leaving wrong results; and it
// compiles each pipeline with LLVM at its first dispatch, where fully
// unrolled 256-long loops cost seconds. Kernels therefore unroll their
// bounded loops (tile loads, loops over D and DV, key/row accumulation) by
// UNROLL, so that an invocation runs few iterations per tile; shaders.
// LoopIterations estimates the count per invocation (the Vulkan backend
// must keep it ≤ 65535 on lavapipe).
#define UNROLL 8u // shaders.loopUnroll mirrors it

// STRIDED_BEGIN(e, n) … STRIDED_END: the workgroup-strided loop
// "for (e = tid; e < n; e += WG)" (tid in scope), UNROLL steps per
// iteration; used for cooperative tile loads.
#define STRIDED_BEGIN(e, n) \
	for (uint e##0 = 0u; e##0 < (n); e##0 += WG * UNROLL) { \
		[[unroll]] for (uint e##u = 0u; e##u < UNROLL; ++e##u) { \
			uint e = e##0 + e##u * WG + tid; \
			if (e < (n)) {
#define STRIDED_END }}}

// UNROLLED_BEGIN(c, n) … UNROLLED_END: "for (c = 0; c < n; ++c)",
// UNROLL steps per iteration.
#define UNROLLED_BEGIN(c, n) \
	for (uint c##0 = 0u; c##0 < (n); c##0 += UNROLL) { \
		[[unroll]] for (uint c##u = 0u; c##u < UNROLL; ++c##u) { \
			uint c = c##0 + c##u; \
			if (c < (n)) {
#define UNROLLED_END }}}

// BUTTERFLY(OP, x, n): reduces x over aligned groups of n lanes (n a
// power of two ≤ 64 and ≤ the subgroup size, a constant) with OP (max or
// add2): every lane of a group ends with the group's result. A statement
// macro without a loop (lavapipe's loop budget); use it in uniform control
// flow (the shuffles need every lane) of a kernel that enables
// GL_KHR_shader_subgroup_shuffle.
#define BUTTERFLY(OP, x, n) \
	if ((n) > 1u) { x = OP(x, subgroupShuffleXor(x, 1u)); } \
	if ((n) > 2u) { x = OP(x, subgroupShuffleXor(x, 2u)); } \
	if ((n) > 4u) { x = OP(x, subgroupShuffleXor(x, 4u)); } \
	if ((n) > 8u) { x = OP(x, subgroupShuffleXor(x, 8u)); } \
	if ((n) > 16u) { x = OP(x, subgroupShuffleXor(x, 16u)); } \
	if ((n) > 32u) { x = OP(x, subgroupShuffleXor(x, 32u)); }
float add2(float a, float b) { return a + b; }

// Dispatch: kernels use gl_WorkGroupID.x for the tile, .y for the head and
// .z for the batch (see each kernel's header and the grids of tiles.go).
