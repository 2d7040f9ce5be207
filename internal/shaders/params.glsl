// params.glsl: the one include shared by every flashvk kernel.
//
// It declares the specialization constants, the storage type and the
// helpers every kernel uses: operand declaration and access (OPERAND, EL,
// VEC), offsets (OFFSET, WIDE), loop and subgroup macros. Each kernel then
// includes its family's push-constant block and the helpers that read it:
// attn_params.glsl (the attention kernels: shaders.Params, masking, row
// bases, LSE/D indexing) or kv_params.glsl (the KV-cache kernels:
// shaders.KVParams). Both name their block pc, which the ADDRESSED
// operand macros read.
//
// Compile-time defines: STORAGE_F16 (set by the build for NAME.f16.spv)
// makes the Q/K/V/O/dO/dQ/dK/dV buffers float16_t, STORAGE_BF16 (for
// NAME.bf16.spv) uint16_t holding bfloat16 bits; otherwise float. LSE, D and
// scratch are always float32, and all math is fp32 (but the coopmat
// kernels' bf16 softcap tanh: ext.glsl EXT_TANH16). ADDRESSED (set for
// NAME.addr.DTYPE.spv) reads and writes those STYPE operands through 64-bit
// buffer device addresses with 64-bit offsets instead of storage-buffer
// bindings (see "Operands" below).
//
// Conventions (internal/spec): Q [B,Nq,Hq,D], K [B,Nk,Hkv,D], V [B,Nk,Hkv,DV],
// O/dO [B,Nq,Hq,DV] through element strides (batch, seq, head), feature
// stride 1; dQ has Q's strides, dK K's, dV V's; LSE and D are contiguous
// [B,Hq,Nq]; query head h reads key/value head h / group.

#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_EXT_control_flow_attributes : require
#ifdef ADDRESSED
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#endif

// Storage type STYPE of the Q/K/V/O/dO/dQ/dK/dV buffers; kernels read them
// only through LOAD (STYPE → float, exact) and write them only through
// STORE (float → STYPE, round to nearest even).
// STYPE_BYTES is its size in bytes.
#if defined(STORAGE_F16)
#define STYPE float16_t
#define STYPE_BYTES 2
#define LOAD(x) float(x)
#define STORE(x) float16_t(x)
#elif defined(STORAGE_BF16)
// bfloat16 as raw uint16_t bits (16-bit storage only; no bfloat16 GLSL
// type): a load shifts the bits into the top of a float32 (exact), a store
// rounds to nearest even in integer arithmetic (bf16_round); the only
// 16-bit operations are loads, stores and conversions, so the modules need
// storageBuffer16BitAccess and no shaderInt16.
#define STYPE uint16_t
#define STYPE_BYTES 2
#define LOAD(x) uintBitsToFloat(uint(x) << 16)
#define STORE(x) uint16_t(bf16_round(x))
#else
#define STYPE float
#define STYPE_BYTES 4
#define LOAD(x) float(x)
#define STORE(x) float(x)
#endif

#ifdef STORAGE_BF16
#include "bf16.glsl" // (bf16_round)
#endif


// Operands. Each kernel declares its STYPE operands (Q, K, V, O, dO, dQ,
// dK, dV) with
//   OPERAND(slot, bnd, Name, op, qual)    scalar access
//   OPERAND_V(slot, bnd, Name, op, qual)  scalar and 16-byte access
// (op the operand's short name, e.g. q or do; qual readonly or writeonly)
// and reads and writes their elements only through
//   EL(op, i)   element i (STYPE), an lvalue
//   VEC(op, i)  16-byte unit i (uvec4: elements 8i … 8i+7 of 16-bit
//               storage, 4i … 4i+3 of fp32; OPERAND_V only), an lvalue
// with i an offset from the row bases below (OFFSET).
// Bindings build: OPERAND declares
//   layout(std430, binding = bnd) qual buffer Name { STYPE op_buf[]; };
// OPERAND_V also the uvec4 view of the same binding
//   layout(std430, binding = bnd) qual buffer NameV { uvec4 op_vec[]; };
// and EL(op, i) is op_buf[i], VEC(op, i) op_vec[i].
// ADDRESSED build: the operand has no binding; it lies at pc.addr[slot]
// (slot = its position among the kernel's STYPE operands in binding
// order, shaders.AddressSlots). OPERAND declares the buffer_reference type
// op_ref { STYPE x; } (aligned to STYPE_BYTES) and the constant op_slot,
// OPERAND_V also op_vref { uvec4 x; } (aligned to 16: the host passes
// 16-byte aligned addresses where the kernel takes its 16-byte path), and
// EL(op, i) is op_ref(pc.addr[op_slot] + uint64_t(i) * STYPE_BYTES).x,
// VEC(op, i) op_vref(pc.addr[op_slot] + uint64_t(i) * 16).x.
#ifdef ADDRESSED
#define OPERAND(slot, bnd, Name, op, qual) \
	layout(buffer_reference, std430, buffer_reference_align = STYPE_BYTES) qual buffer op##_ref { STYPE x; }; \
	const uint op##_slot = slot;
#define OPERAND_V(slot, bnd, Name, op, qual) \
	OPERAND(slot, bnd, Name, op, qual) \
	layout(buffer_reference, std430, buffer_reference_align = 16) qual buffer op##_vref { uvec4 x; };
#define EL(op, i) op##_ref(pc.addr[op##_slot] + uint64_t(i) * uint64_t(STYPE_BYTES)).x
#define VEC(op, i) op##_vref(pc.addr[op##_slot] + uint64_t(i) * uint64_t(16)).x
#else
#define OPERAND(slot, bnd, Name, op, qual) \
	layout(std430, binding = bnd) qual buffer Name { STYPE op##_buf[]; };
#define OPERAND_V(slot, bnd, Name, op, qual) \
	OPERAND(slot, bnd, Name, op, qual) \
	layout(std430, binding = bnd) qual buffer Name##V { uvec4 op##_vec[]; };
#define EL(op, i) op##_buf[i]
#define VEC(op, i) op##_vec[i]
#endif

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

// lse_in is a row's LSE as the backward kernels read it: −Inf — an empty
// row, P = 0 — where it is −Inf or where its base-2 value is not a finite
// float (an LSE of +Inf, whose P = e^(s−∞) is 0, or one beyond
// ±2.3587e38, outside the range the kernels compute in); NaN stays NaN.
// internal/cpu applies the same rule.
float lse_in(float l) { return isinf(l * LOG2E) ? NEG_INF : l; }

// tanh2 is tanh(u/(2·log2e)) as 1 − 2/(2^|u| + 1) with u's sign: one
// exp2 and one division, no branch, the sign set by a bit operation (the
// value before it is ≥ +0; two compares and selects ran the softcap 3–5%
// slower on an NVIDIA H200); its absolute error is a few fp32 ulps
// of 1 — what softcapped scores need (c·tanh carries c times it, far below
// the softmax's own rounding at the scales softcaps use). ±Inf gives ±1,
// NaN stays NaN. ext.glsl's softcap and decode's use it. (Measured on an
// NVIDIA H200: the division beats both a Newton-refined integer estimate
// of the reciprocal, six FMAs, and GLSL's tanh — bench/NOTES.md.)
float tanh2(float u) {
	float t = 1.0 - 2.0 / (exp2(abs(u)) + 1.0); // (≥ +0; NaN for NaN)
	return uintBitsToFloat(floatBitsToUint(t) | (floatBitsToUint(u) & 0x80000000u)); // (u's sign)
}

// tanh2c is c·tanh2(u) for c > 0 with c folded in: u's sign on
// c − 2c/(2^|u| + 1), one FMA where tanh2 then c· take a subtraction and a
// product (≥ +0 before the sign up to the reciprocal's rounding; ±Inf
// gives ±c, NaN stays NaN). ext.glsl's ext_capped takes it.
float tanh2c(float u, float c) {
	float z = fma(-2.0 * c, 1.0 / (exp2(abs(u)) + 1.0), c);
	return uintBitsToFloat(floatBitsToUint(z) | (floatBitsToUint(u) & 0x80000000u)); // (u's sign)
}

// tanh_poly is tanh(u) for |u| ≤ TANH_POLY_MAX: its Taylor polynomial to
// degree 13 in eight FMA-unit operations, no exp2 and no division; within
// 7e-8 of tanh over that range in fp32 (tanh2: 1.1e-7), and not for
// larger |u| (1.1e-6 at 0.625, 1.6e-5 at 0.75). NaN stays NaN.
// TANH_Pk is the coefficient of u^(2k+1).
const float TANH_POLY_MAX = 0.5;
#define TANH_P0 1.0
#define TANH_P1 (-1.0 / 3.0)
#define TANH_P2 (2.0 / 15.0)
#define TANH_P3 (-17.0 / 315.0)
#define TANH_P4 (62.0 / 2835.0)
#define TANH_P5 (-1382.0 / 155925.0)
#define TANH_P6 (21844.0 / 6081075.0)
float tanh_poly(float u) {
	float u2 = u * u;
	float p = fma(u2, TANH_P6, TANH_P5);
	p = fma(u2, p, TANH_P4);
	p = fma(u2, p, TANH_P3);
	p = fma(u2, p, TANH_P2);
	p = fma(u2, p, TANH_P1);
	p = fma(u2, p, TANH_P0);
	return u * p;
}

// The backward's softmax: P = 2^x, x = s·scale·log2e − l2 with l2 =
// LSE·log2e of the row, and dS = P·(dP − D).
//
// Most rows take it plainly. A careful row (careful_l2) takes it with two
// guards the others do not need:
//   - it is dead (l2 = −inf: no key, or only −inf scores): it adds nothing,
//     P and dS are exactly 0 (BWD_DS; P·(NaN) would be NaN), and the
//     kernels zero its Q and dO rows before they reach dK and dV;
//   - or |l2| ≥ 2^14, where x carries rounding noise of 2^-9 and more: P ≤ 1
//     in exact arithmetic, so x > 0 gives 1, and so does x within
//     2^-21·|l2| below 0 (a few fp32 ulps of l2, the noise of the row's
//     maximum itself), which keeps scores beyond fp32's resolution (huge
//     scales) at the forward's one-hot softmax instead of 2^±noise = 0 or
//     Inf. NaN stays NaN.
// internal/cpu applies the same rule to every row (snap).
bool careful_l2(float l2) { return l2 == NEG_INF || abs(l2) >= 16384.0; }
float snap_bound(float l2) { return -abs(l2) * 4.76837158203125e-7; }
float prob(float x, float t) { return x >= t ? 1.0 : exp2(x); }
// BWD_P(CAREFUL, x, l2) and BWD_DS(CAREFUL, vis, p, d) are P and dS = p·d
// for a visible element (vis) of a careful row when the constant CAREFUL
// is true, of a plain row when false (the kernels branch once per row or
// step and expand the element loop with each).
#define BWD_P(CAREFUL, x, l2) ((CAREFUL) ? prob((x), snap_bound(l2)) : exp2(x))
#define BWD_DS(CAREFUL, vis, p, d) ((CAREFUL) ? ((vis) ? (p) * (d) : 0.0) : (p) * (d))

#define MASK_NONE 0u
#define MASK_CAUSAL_TL 1u
#define MASK_CAUSAL_BR 2u

// Row base offsets (element index of feature 0 of row (b, s, h)) are one
// function per operand in attn_params.glsl (q_base …); varlen (packed
// sequences through cu_seqlens) will later replace the batch term
// b*stride_b (and the sequence lengths) there, in that one place per
// operand; kernels never compute offsets themselves. Offsets have type OFFSET: uint in the bindings build (each operand's
// binding must hold < 2^32 elements), uint64_t in the ADDRESSED build
// (every product widened first by WIDE; the strides stay 32-bit). Kernels
// keep row bases and element offsets in OFFSET variables.
#ifdef ADDRESSED
#define OFFSET uint64_t
#define WIDE(x) uint64_t(x)
#else
#define OFFSET uint
#define WIDE(x) (x)
#endif

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
