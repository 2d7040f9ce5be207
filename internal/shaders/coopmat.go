package shaders

import "slices"

// Cooperative-matrix kernels (VK_KHR_cooperative_matrix): flash_cm, the
// FlashAttention-2 forward on the matrix units, and flash_cm_probe, which
// reports the element→invocation layout of the coopmat types flash_cm uses
// (the host derives flash_cm's layout spec constants from it), and the
// backward's bwd_cm_dkdv and bwd_cm_dq. Each is built for f16 storage
// (NAME.f16.spv: float16_t buffers and operands) and for bf16 storage
// (NAME.bf16.spv: uint16 buffers of bfloat16 bits, bfloat16_t operands via
// GL_EXT_bfloat16, compiled with the pinned glslang 16 of
// scripts/toolchain.sh), with --target-env vulkan1.3 (SPIR-V 1.6), by
// `make shaders`; one source serves both (cm_types.glsl). In both, the
// accumulators, the softmax and every elementwise step are fp32 (but the
// bf16 builds' softcap tanh, fp16: CMHalfTanh, ext.glsl); P and dS
// are rounded to the storage type for the MMAs (to nearest: fp16 ties to
// even, bf16 ties away from zero in integer arithmetic, bf16.glsl; never
// through fp16), and results are rounded to it on store (to nearest
// even). flash_cm, bwd_cm_dkdv and bwd_cm_dq are also built for f32
// storage (NAME.f32.spv, glslang 16): every operand, P and dS split into
// CMPlanes bf16 planes, each product the six plane products with fp32
// accumulation, results stored as fp32 (the backward's in MODE 1 only).
// See flash_cm.comp's header and the integration section of
// bench/NOTES.md.
//
// Device requirements: a subgroup-scope f16·f16+f32→f32 (bf16 modules:
// bf16·bf16+f32→f32) cooperative-matrix shape (device.Info.CoopMat; CM_N
// and CM_K multiples of 8), shaderFloat16 (glslang declares the Float16
// capability for bfloat16 types too), storageBuffer16BitAccess, subgroup
// shuffles, and subgroups of exactly SUBGROUP invocations
// (RequiredSubgroupSize where the size may vary, full subgroups). bf16
// modules also need VK_KHR_shader_bfloat16's shaderBFloat16Type and
// shaderBFloat16CooperativeMatrix (device.Info.BFloat16,
// BFloat16CoopMat), and they convert fp32 accumulators to a bf16
// CM_M×CM_N accumulator to store results, so the device must report a
// bf16 matrix of that size (vkattn checks both). The probe of each storage
// type reports its own A layout (bf16's may differ from fp16's).

// Cooperative-matrix kernel names.
const (
	// KernelFlashCM is the coopmat FlashAttention-2 forward (f16, bf16,
	// and f32 with every operand split into CMPlanes bf16 planes).
	KernelFlashCM = "flash_cm"
	// KernelFlashCMProbe reports the coopmat element layout (one binding:
	// a float32 buffer of FlashCMProbeFloats(subgroup) elements).
	KernelFlashCMProbe = "flash_cm_probe"
	// KernelBwdCMDKDV is the coopmat backward's dK/dV kernel (f16, bf16,
	// and f32 in CMPlanes bf16 planes; bindings as bwd_dkdv).
	KernelBwdCMDKDV = "bwd_cm_dkdv"
	// KernelBwdCMDQ is the coopmat backward's dQ kernel (f16, bf16, and
	// f32 in planes; bindings as bwd_dq).
	KernelBwdCMDQ = "bwd_cm_dq"
)

// CoopMatKernels lists the cooperative-matrix kernels (not in Kernels: they
// have no DefaultConfig and their own spec constants, and the probe has no
// f32 build).
var CoopMatKernels = []string{KernelFlashCM, KernelFlashCMProbe, KernelBwdCMDKDV, KernelBwdCMDQ}

// KernelDTypes lists the storage types kernel (a base or addressed name)
// is built for (nil for an unknown kernel); an addressed variant has its
// base kernel's.
func KernelDTypes(kernel string) []string {
	kernel = BaseKernel(kernel)
	if kernel == KernelFlashCMProbe {
		return []string{DTypeF16, DTypeBF16}
	}
	if slices.Contains(CoopMatKernels, kernel) {
		return []string{DTypeF32, DTypeF16, DTypeBF16}
	}
	if _, ok := kernelBindings[kernel]; ok {
		return append([]string(nil), DTypes...)
	}
	return nil
}

// flash_cm / flash_cm_probe specialization constant IDs (beyond 0 … 5).
const (
	SpecCMM       uint32 = 10 // coopmat M (query rows per subgroup)
	SpecCMN       uint32 = 11 // coopmat N
	SpecCMK       uint32 = 12 // coopmat K
	SpecCMMode    uint32 = 13 // 0 shared-memory softmax, 1 register softmax
	SpecCMLen     uint32 = 14 // accumulator components per invocation
	SpecCMRL      uint32 = 15 // rows per invocation (MODE 1)
	SpecCMSlotLo  uint32 = 16 // local row of components 0–7 (4 bits each)
	SpecCMSlotHi  uint32 = 17 // … of components 8–15
	SpecCMXorMask uint32 = 18 // lane bits shared by a row
	SpecCMPermLo  uint32 = 19 // A→accumulator component map 0–7
	SpecCMPermHi  uint32 = 20 // … 8–15
	SpecCMVec     uint32 = 21 // 16-byte loads (D, DV, strides multiples of 8)
	SpecCMPrefet  uint32 = 22 // flash_cm: register prefetch of the next K/V tile (VEC only); bwd_cm_dkdv: of the next Q/dO step; bwd_cm_dq: of the next K/V tile
	SpecCMKVReg   uint32 = 23 // bwd_cm_dkdv: K_j, V_j A fragments kept in registers
	SpecCMPairs   uint32 = 24 // flash_cm: subgroups in pairs that split the key tile's S and O's columns; bwd_cm_dq: S, dP and dQ's columns
	SpecCMPart    uint32 = 25 // bwd_cm_dkdv: 0 dK and dV, 1 dV only, 2 dK only, 3 and 4 dK's column halves
	SpecCMFHalves uint32 = 26 // bwd_cm_dkdv (every build), bwd_cm_dq (the f32 build): subgroups in pairs that split the head dim's features and the gradients' columns, and add their partial Sᵀ (S) and dPᵀ (dP)
	SpecCMRowBlk  uint32 = 27 // flash_cm, bwd_cm_dq: row blocks of CM_M query rows per subgroup (MODE 1, 16-bit storage, no pairs, no bias)
	SpecCMStagger uint32 = 29 // flash_cm, bwd_cm_dq: each workgroup walks its key tiles, bwd_cm_dkdv its query steps, from a place of its own (not with a bias)
	SpecCMCols    uint32 = 30 // every coopmat kernel (MODE 1): 1 when every invocation's accumulator columns lie at the same offsets from its smallest (CM_COLD_LO/HI)
	SpecCMColDLo  uint32 = 31 // every coopmat kernel: column of components 0–7 minus the invocation's smallest (4 bits each)
	SpecCMColDHi  uint32 = 32 // … of components 8–15
)

var (
	// cmSpecIDs: every coopmat kernel's (cm_common.glsl's and PREFETCH);
	// flash_cm and bwd_cm_dq add PAIRS and ROWBLK, bwd_cm_dkdv KVREG and PART, both
	// backward kernels FHALVES (the backward kernels read 10–14, 19–22
	// and 29 of cm_common.glsl's), and each STAGGER (cm_common.glsl's)
	// after them, and each ends with the column offsets (cm_common.glsl's
	// CM_COLS, CM_COLD_LO/HI).
	cmSpecIDs = append(append([]uint32(nil), sharedSpecIDs...), SpecExt,
		SpecCMM, SpecCMN, SpecCMK, SpecCMMode, SpecCMLen, SpecCMRL, SpecCMSlotLo, SpecCMSlotHi,
		SpecCMXorMask, SpecCMPermLo, SpecCMPermHi, SpecCMVec, SpecCMPrefet)
	flashCMSpecIDs = append(append([]uint32(nil), cmSpecIDs...), SpecCMPairs, SpecCMRowBlk, SpecCMStagger, SpecCMCols, SpecCMColDLo, SpecCMColDHi)
	probeSpecIDs   = []uint32{SpecWorkgroupSize, SpecCMM, SpecCMN, SpecCMK}
	bwdCMSpecIDs   = cmSpecIDs
	bwdCMKVSpecIDs = append(append([]uint32(nil), bwdCMSpecIDs...), SpecCMKVReg, SpecCMPart, SpecCMFHalves, SpecCMStagger, SpecCMCols, SpecCMColDLo, SpecCMColDHi)
	bwdCMDQSpecIDs = append(append([]uint32(nil), bwdCMSpecIDs...), SpecCMPairs, SpecCMFHalves, SpecCMRowBlk, SpecCMStagger, SpecCMCols, SpecCMColDLo, SpecCMColDHi)
)

// CMPlanes is the number of bf16 planes the coopmat kernels split each
// operand of storage type dtype into: 3 for f32 (x = x0 + x1 + x2 exactly; a product
// is the six plane products i + j < 3, fp32-accurate), 1 for f16 and bf16
// (the operands themselves).
func CMPlanes(dtype string) int {
	if dtype == DTypeF32 {
		return 3
	}
	return 1
}

// CMHalfTanh reports whether the coopmat kernels of storage type dtype
// take the softcap's tanh in fp16 (ext.glsl's EXT_TANH16: the bf16
// builds, within about 2^-11 of tanh; the f16 and f32 builds keep fp32's
// tanh2).
func CMHalfTanh(dtype string) bool { return dtype == DTypeBF16 }

// FlashCMProbeFloats is the length of flash_cm_probe's buffer (float32)
// for subgroup size sg: 8 header words, then 64 words per lane for the
// accumulator and 64 per lane for the A type.
func FlashCMProbeFloats(sg int) int { return 8 + 128*sg }

// FlashCMShape is what flash_cm's shared memory depends on: coopmat shape
// M×N×K, NSG subgroups (in Pairs sharing M rows: MODE 1, 16-bit storage;
// or each owning RowBlocks blocks of M rows, 0 counting as 1), BC keys per
// tile, Mode (0 or 1), head dims D, DV and CMPlanes Planes per operand (0
// counts as 1).
type FlashCMShape struct {
	M, N, K, NSG, BC, Mode, D, DV, Planes int
	Pairs                                 bool
	RowBlocks                             int
}

// FlashCMSharedBytes is flash_cm's shared memory (bytes) for shape s; it
// mirrors the shared arrays of flash_cm.comp.
func FlashCMSharedBytes(s FlashCMShape) int {
	m, n, k, nsg, bc, mode, d, dv := s.M, s.N, s.K, s.NSG, s.BC, s.Mode, s.D, s.DV
	planes := max(s.Planes, 1)
	ceilTo := func(x, q int) int { return (x + q - 1) / q * q }
	dp := ceilTo(d, max(k, 8))
	dvp := ceilTo(dv, max(n, 8))
	ldk4, ldv4 := dp/8+1, dvp/8+1
	pairs := s.Pairs && mode == 1 && planes == 1 // (the shader ignores PAIRS elsewhere)
	br := nsg * m * max(s.RowBlocks, 1)
	if pairs {
		br /= 2
	}
	ldo4, orows := ldv4, br // O leaves as 16-bit (8 per unit) or, split, fp32 (4) …
	if planes > 1 {
		ldo4, orows = dvp/4+1, min(nsg, 4)*m*max(s.RowBlocks, 1) // … then four subgroups' rows at a time
	}
	skv := max(br*ldk4, planes*bc*(ldk4+ldv4), orows*ldo4, m*n/4)
	if pairs {
		skv += br * (bc/4 + 1) // the pairs' S (fp32)
	}
	b := 16 * skv
	if mode == 0 {
		b += nsg*m*(bc+4)*4 + planes*nsg*m*(bc+8)*2 // (MODE 0 has neither pairs nor row blocks)
	} else {
		b += 4 + ceilTo(2*planes, 4) // MODE 1: the one-element S and P arrays (P per plane)
	}
	if planes > 1 {
		b += nsg * 4 // sQNonfinite
	}
	return b + br*4 + DropPlaceholder + BiasStagePlaceholder
}

// BiasStageBytes is the shared memory (bytes) of the bias stage
// (bias_stage.glsl's sBiasU) of a flash_cm tile whose element loop runs
// in registers (MODE 1) with a bias of esz bytes per element (4 for float32,
// 2 for a 16-bit bias): nsg subgroups' areas, each one stage of about
// 1 KiB of the bias values of m×n accumulators, nt of them per subgroup
// and tile. It mirrors the shader's constants; without a staged bias the
// area is one unit (BiasStagePlaceholder), which FlashCMSharedBytes
// counts.
func BiasStageBytes(esz, nsg, m, n, nt int) int {
	g := max(1024/(m*n*esz), 1)
	g = min(g, nt)
	if nt%g != 0 {
		g = 1
	}
	ue := 16 / esz
	ldu := (g*n+ue-1)/ue + 1
	return 16 * nsg * m * ldu
}

// BiasStagePlaceholder is sBiasU's size without a staged bias.
const BiasStagePlaceholder = 16

// BwdCMShape is what the shared memory of bwd_cm_dkdv (DKDV) or bwd_cm_dq
// depends on: coopmat shape M×N×K, NSG subgroups, the spec constants BR and
// BC (bwd_cm_dkdv: BR query rows per step, BC = NSG·M keys; bwd_cm_dq: BR =
// NSG·M·ROWBLK query rows, BC keys per tile), MODE (the split build has none but
// 1), head dims D, DV, bwd_cm_dkdv's PART and KVREG (K_j and V_j in
// registers: the 16-bit builds then stage Q_i and dO_i over them, and the
// parts that write dK only stage V_j where K_j was), and the storage
// type's CMPlanes (0 counts as 1). (bwd_cm_dq's subgroup pairs take BR =
// NSG·M/2, its row blocks BR = NSG·M·ROWBLK, and neither shared memory
// of its own.) FHalves (pairs over the
// features: bwd_cm_dkdv's, BC = NSG·M/2, and the split build's bwd_cm_dq,
// BR = NSG·M/2) pads D and DV to twice the chunk and adds the subgroups'
// partial products: after the K/V tiles (split bwd_cm_dq), in K's staging
// (split bwd_cm_dkdv) or after Q's and dO's (16-bit bwd_cm_dkdv, whose V
// is staged in K's place).
type BwdCMShape struct {
	DKDV                              bool
	M, N, K, NSG, BR, BC, Mode, D, DV int
	Part                              int
	KVReg                             bool
	Planes                            int
	FHalves                           bool
}

// BwdCMSharedBytes is the shared memory (bytes) of a backward coopmat
// kernel; it mirrors the shared arrays of the two kernels.
func BwdCMSharedBytes(s BwdCMShape) int {
	planes := max(s.Planes, 1)
	fh := s.FHalves && (s.DKDV || planes > 1) // (the 16-bit bwd_cm_dq has none)
	pad := max(s.K, s.N, 8)
	if fh {
		pad *= 2 // (the halves are whole chunks)
	}
	ceilTo := func(x, q int) int { return (x + q - 1) / q * q }
	dp, dvp := ceilTo(s.D, pad), ceilTo(s.DV, pad)
	ldk4, ldv4 := dp/8+1, dvp/8+1
	outEl := 8 // results leave as 16-bit (8 per unit) …
	if planes > 1 {
		outEl = 4 // … or, split, as fp32
	}
	ldk4o, ldv4o := dp/outEl+1, dvp/outEl+1
	br, bc := s.BR, s.BC
	mp := s.M * s.N / 4
	xch := 0 // (fh: every subgroup's partial S and dP over the step's rows or the tile's keys, in units)
	if fh {
		n := bc
		if s.DKDV {
			n = br
		}
		xch = s.NSG * 2 * (n / s.N) * mp
	}
	var b int
	if s.DKDV {
		sk, sv := max(bc*ldk4, mp), bc*ldv4
		switch {
		case planes > 1: // K and V pass through K's staging into registers (dK and dV leave from unit 0, over Q's and dO's planes too)
			sk, sv = max(bc*ldk4, bc*ldv4, mp, xch), 0
		case s.Part == 1: // dV only: no V; dV staged in K's place
			sk, sv = max(sk, bc*ldv4), 0
		case (s.Part >= 2 || s.FHalves) && s.KVReg: // dK only or pairs over the features, K and V into registers: V staged in K's place after K
			sk, sv = max(sk, bc*ldv4), 0
		}
		qo := planes * br * (ldk4 + ldv4)
		switch {
		case planes > 1:
			b = 16*max(sk+qo, bc*ldk4o, bc*ldv4o) + 8*br
		case s.KVReg: // Q_i and dO_i (and the pairs' partial products) over K_j and V_j
			b = 16*max(sk+sv, qo+xch) + 8*br
		default:
			b = 16*(sk+sv+qo+xch) + 8*br
		}
		if s.Mode == 0 && planes == 1 { // (the split build has no MODE 0)
			b += s.NSG * s.M * (8*(br+4) + 4*(br+8))
		} else {
			b += 4*2 + 2*2
		}
		return b + DropPlaceholder
	}
	b = 16*max(br*ldk4, br*ldv4, br*ldk4o, planes*bc*(ldk4+ldv4)+xch, mp) + 8*br
	if s.Mode == 0 && planes == 1 {
		b += s.NSG * s.M * (8*(bc+4) + 2*(bc+8))
	} else {
		b += 4*2 + 2 // (the pairs' dS goes through V's staging)
	}
	return b + DropPlaceholder
}
