// bias_stage.glsl: the bias values of flash_cm's register (MODE 1)
// element loop, through shared memory. Include after cm_common.glsl in a
// kernel with BIAS_BINDING whose accumulators' rows are queries (bias
// rows) and columns keys, having defined BIAS_NT (accumulators per
// subgroup and tile) and BIAS_REGS (the element loop runs in registers),
// both constant expressions. The area exists only where both a bias and
// BIAS_REGS do (BIAS_ON). The backward kernels load each component's
// value (ext.glsl BIAS_FRAG): staged, bwd_cm_dq ran 4–6% slower on an
// NVIDIA H200, and bwd_cm_dkdv, whose components' lanes span few bias
// rows, 28% slower (bench/NOTES.md).
//
// Why: read element by element, each invocation loads its accumulator
// components' values, and one subgroup-wide load of one component touches
// as many 128-byte lines as the accumulator layout spreads the component
// over rows (8 on an NVIDIA H200): the bias tile's loads took as many L1
// passes as the K and V fragment loads of the products, and the bias
// forward ran at 0.37× of the plain kernel's TFLOP/s (bench/NOTES.md).
// Staged, a subgroup loads its values as 16-byte units of whole row
// segments (bias_unit), copies them into its own area of sBiasU, and each
// invocation reads its components from there.
//
// A stage is BIAS_G accumulators' rectangle of BIAS_SR bias rows × BIAS_SC
// keys (about 1 KiB: one 16×16 float32 block, two of fp16 or bf16), row
// segments of BIAS_UR 16-byte units padded by one unit in shared memory
// (BIAS_LDU; the padding spreads a component's rows over the banks). A
// tile's BIAS_NS = BIAS_NT / BIAS_G stages are loaded into registers
// (BIAS_FETCH, BIAS_NUL units per invocation and stage) before the tile's
// products are issued, so that their latency overlaps them, and copied
// into the area one stage at a time as the element loop reaches them
// (BIAS_PUT), which reads each value from there (bias_at): no register
// holds a component's value beyond its use. shaders.BiasStageBytes
// mirrors the area's size.

#if STYPE_BYTES == 2
const uint BIAS_ESZ = (EXT & EXT_ON_BIAS_F32) != 0u ? 4u : 2u; // bytes per bias element
#else
const uint BIAS_ESZ = 4u;
#endif
const uint BIAS_ON = ((EXT & EXT_ON_BIAS) != 0u ? 1u : 0u) * ((BIAS_REGS) ? 1u : 0u);
const uint BIAS_UE = 16u / BIAS_ESZ; // elements per 16-byte unit
const uint BIAS_G0 = 1024u / (CM_M * CM_N * BIAS_ESZ);
const uint BIAS_G1 = BIAS_G0 < 1u ? 1u : (BIAS_G0 > BIAS_NT ? BIAS_NT : BIAS_G0);
const uint BIAS_G = BIAS_NT % BIAS_G1 == 0u ? BIAS_G1 : 1u; // accumulators per stage
const uint BIAS_NS = BIAS_NT / BIAS_G;                        // stages per tile
const uint BIAS_SR = CM_M;                                      // bias rows per stage
const uint BIAS_SC = BIAS_G * CM_N;                             // keys per stage
const uint BIAS_UR = (BIAS_SC + BIAS_UE - 1u) / BIAS_UE;      // units per row segment
const uint BIAS_LDU = BIAS_UR + 1u;
const uint BIAS_NU = BIAS_SR * BIAS_UR;                        // units per stage
const uint BIAS_NUL = (BIAS_NU + SUBGROUP - 1u) / SUBGROUP;    // … per invocation
const uint BIAS_AREA = BIAS_SR * BIAS_LDU;                     // a subgroup's area (units)
shared uvec4 sBiasU[BIAS_ON != 0u ? NSG * BIAS_AREA : 1u];

layout(std430, binding = BIAS_BINDING) readonly buffer BiasU4 { uvec4 bias_u4[]; };

// bias_bits is the raw bits of 16-bit bias element x; bias_half its value.
#if STYPE_BYTES == 2
#ifdef STORAGE_BF16
uint bias_bits(uint x) { return uint(bias_st[x]); }
float bias_half(uint u) { return uintBitsToFloat(u << 16u); }
#else
uint bias_bits(uint x) { return packHalf2x16(vec2(float(bias_st[x]), 0.0)); } // (exact)
float bias_half(uint u) { return unpackHalf2x16(u).x; }
#endif
#endif

// bias_unit is the 16-byte unit of the current (b, h)'s bias row q from key
// k on (BIAS_UE elements, raw): 0 for a row past the sequence's and keys
// past its key count (ext_bias's rule: nothing outside the bias's extent
// is read), one 16-byte load where the plane's offset and row stride are
// whole units and the unit lies before the key count, else element by
// element.
uvec4 bias_unit(uint q, uint k) {
	uint nk = read_keys();
	uvec4 u = uvec4(0u);
	if (q >= seq_nq || k >= nk) {
		return u;
	}
	uint x = ext_bias0 + q * ext_brow + k;
	if (((ext_bias0 | ext_brow | k) & (BIAS_UE - 1u)) == 0u && k + BIAS_UE <= nk) {
		return bias_u4[x / BIAS_UE];
	}
	[[unroll]] for (uint e = 0u; e < BIAS_UE; ++e) {
		if (k + e < nk) {
#if STYPE_BYTES == 2
			if (BIAS_ESZ == 2u) {
				u[(e / 2u) & 3u] |= bias_bits(x + e) << (16u * (e & 1u));
				continue;
			}
#endif
			u[e & 3u] = floatBitsToUint(bias_f32[x + e]);
		}
	}
	return u;
}

// bias_sget is element (row, key) of the stage in the area whose first
// unit is a.
float bias_sget(uint a, uint row, uint key) {
	uint w = (a + row * BIAS_LDU) * 4u + key * BIAS_ESZ / 4u;
	uint u = sBiasU[w / 4u][w & 3u];
#if STYPE_BYTES == 2
	if (BIAS_ESZ == 2u) {
		return bias_half((u >> (16u * (key & 1u))) & 0xFFFFu);
	}
#endif
	return uintBitsToFloat(u);
}

// BIAS_FETCH(BU, Q0, K0): BU[s·BIAS_NUL + k] = this invocation's units of
// stage s (< BIAS_NS), whose first bias row is Q0 and first key K0
// (expressions of s). Declare BU with BIAS_NS·BIAS_NUL elements.
#define BIAS_FETCH(BU, Q0, K0) \
	[[unroll]] for (uint s = 0u; s < BIAS_NS; ++s) { \
		[[unroll]] for (uint k_ = 0u; k_ < BIAS_NUL; ++k_) { \
			uint u_ = gl_SubgroupInvocationID + k_ * SUBGROUP; \
			uint r_ = u_ / BIAS_UR; \
			BU[s * BIAS_NUL + k_] = u_ < BIAS_NU ? bias_unit((Q0) + r_, (K0) + (u_ - r_ * BIAS_UR) * BIAS_UE) : uvec4(0u); \
		} \
	}

// BIAS_PUT(BU, S): stage S (a constant) of BU into the subgroup's area,
// between subgroup barriers (the area's previous values read before, the
// new ones visible to the whole subgroup after). The kernel's element
// loop puts stage t / BIAS_G before it scores accumulator t, and reads
// each component's value with bias_at.
#define BIAS_PUT(BU, S) \
	{ \
		subgroupMemoryBarrierShared(); \
		subgroupBarrier(); \
		[[unroll]] for (uint k_ = 0u; k_ < BIAS_NUL; ++k_) { \
			uint u_ = gl_SubgroupInvocationID + k_ * SUBGROUP; \
			uint r_ = u_ / BIAS_UR; \
			if (u_ < BIAS_NU) { \
				sBiasU[gl_SubgroupID * BIAS_AREA + r_ * BIAS_LDU + (u_ - r_ * BIAS_UR)] = BU[(S) * BIAS_NUL + k_]; \
			} \
		} \
		subgroupMemoryBarrierShared(); \
		subgroupBarrier(); \
	}

// bias_at is the value of bias row row, key key of the stage in the
// subgroup's area (0 without a staged bias).
float bias_at(uint row, uint key) { return BIAS_ON != 0u ? bias_sget(gl_SubgroupID * BIAS_AREA, row, key) : 0.0; }
