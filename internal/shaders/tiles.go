package shaders

import "fmt"

// Dispatch grids. Every kernel puts its tile (or row) index in x, the head
// in y and the batch in z, so each dimension stays far below the 65535 that
// Vulkan guarantees for maxComputeWorkGroupCount[0..2] for any realistic
// problem (x = ceil(N/tile) ≤ 65535 needs N ≤ 65535·tile; naive's x = Nq
// needs Nq ≤ 65535 on a minimal device; NVIDIA and lavapipe allow 2^31−1 in
// x). B·Hq is never folded into one dimension.

func ceilDiv(a, b int) int { return (a + b - 1) / b }

func grid(x, y, z int) [3]uint32 { return [3]uint32{uint32(x), uint32(y), uint32(z)} }

// NaiveGrid is the dispatch of each of naive's three passes: (Nq, Hq, B).
func NaiveGrid(b, hq, nq int) [3]uint32 { return grid(nq, hq, b) }

// MinimalGrid is minimal's dispatch: (ceil(Nq/BR), Hq, B).
func MinimalGrid(b, hq, nq, br int) [3]uint32 { return grid(ceilDiv(nq, br), hq, b) }

// FlashFwdGrid is flash's dispatch: (ceil(Nq/BR), Hq, B).
func FlashFwdGrid(b, hq, nq, br int) [3]uint32 { return grid(ceilDiv(nq, br), hq, b) }

// BwdPreGrid is bwd_pre's dispatch: (ceil(Nq/BR), Hq, B).
func BwdPreGrid(b, hq, nq, br int) [3]uint32 { return grid(ceilDiv(nq, br), hq, b) }

// BwdDKDVGrid is bwd_dkdv's dispatch: (ceil(Nk/BC), Hkv, B).
func BwdDKDVGrid(b, hkv, nk, bc int) [3]uint32 { return grid(ceilDiv(nk, bc), hkv, b) }

// BwdDQGrid is bwd_dq's dispatch: (ceil(Nq/BR), Hq, B).
func BwdDQGrid(b, hq, nq, br int) [3]uint32 { return grid(ceilDiv(nq, br), hq, b) }

// Shared memory. All kernels stage tiles in shared memory as fp32, whatever
// the storage type, so f16 does not change these sizes (the parameter is
// kept so that a later f16 staging can change the formulas in one place).

// FlashFwdSharedBytes is flash's shared memory:
// 4·(BR·(D+1) + BC·max(D+1, DV) + BR·(BC+1)) and the one word of ext.glsl's
// keep bits without dropout (dropout's are DropSharedBytes).
func FlashFwdSharedBytes(br, bc, d, dv int, f16 bool) int {
	_ = f16
	return 4*(br*(d+1)+bc*max(d+1, dv)+br*(bc+1)) + DropPlaceholder
}

// MinimalSharedBytes is minimal's shared memory: 4·(BC·(D+DV) + BR·DV).
func MinimalSharedBytes(br, bc, d, dv int, f16 bool) int {
	_ = f16
	return 4 * (bc*(d+dv) + br*dv)
}

// NaiveSharedBytes is naive's shared memory: 4·(D + WG).
func NaiveSharedBytes(wg, d int) int { return 4 * (d + wg) }

// BwdDKDVSharedBytes is bwd_dkdv's shared memory:
// 4·((BC+BR)·(D+DV+2) + 2·BR·(BC+1) + 2·BR) and the keep bits' word.
func BwdDKDVSharedBytes(br, bc, d, dv int, f16 bool) int {
	_ = f16
	return 4*((bc+br)*(d+dv+2)+2*br*(bc+1)+2*br) + DropPlaceholder
}

// BwdDQSharedBytes is bwd_dq's shared memory:
// 4·((BC+BR)·(D+DV+2) + BR·(BC+1) + 2·BR) and the keep bits' word.
func BwdDQSharedBytes(br, bc, d, dv int, f16 bool) int {
	_ = f16
	return 4*((bc+br)*(d+dv+2)+br*(bc+1)+2*br) + DropPlaceholder
}

// Config is a kernel's tile configuration: its specialization constants
// other than the problem's head dims and the device's subgroup size.
type Config struct {
	WG int // workgroup size (spec constant 0)
	BR int // query rows per tile (spec constant 3)
	BC int // key rows per tile (spec constant 4)
}

// Limits are the device limits that constrain a Config.
type Limits struct {
	// SharedBytes is maxComputeSharedMemorySize.
	SharedBytes int
	// Subgroup is VkPhysicalDeviceSubgroupProperties.subgroupSize.
	Subgroup int
	// MaxWorkgroupSize is min(maxComputeWorkGroupInvocations,
	// maxComputeWorkGroupSize[0]).
	MaxWorkgroupSize int
	// Dropout is set for a call that drops: the kernels that draw keep bits
	// (flash, bwd_dkdv, bwd_dq) then need DropSharedBytes(BR, BC) of shared
	// memory for them and key tiles that DropKeyTile accepts.
	Dropout bool
}

// DropKeyTile reports whether a dropout kernel's key tile of bc keys is
// one ext.glsl's drop_word fills: 8, 16 or a multiple of 32 (a Philox
// block covers 16 keys, a keep word 32).
func DropKeyTile(bc int) bool { return bc == 8 || bc == 16 || bc%32 == 0 }

// CheckDropKeys says why a dropout kernel cannot take a key tile of bc
// keys (DropKeyTile), nil when it can.
func CheckDropKeys(bc int) error {
	if !DropKeyTile(bc) {
		return fmt.Errorf("dropout needs key tiles of 8, 16 or a multiple of 32 keys, not %d", bc)
	}
	return nil
}

// FlashLayout is flash's thread layout for one Config (see flash.comp).
type FlashLayout struct {
	TC  int // threads per query row (power of two ≤ subgroup)
	TR  int // row groups (WG/TC)
	RM  int // query rows per thread (BR/TR)
	CN  int // key columns per thread (BC/TC)
	DVN int // output columns per thread (ceil(DV/TC))
}

// Registers is the number of fp32 values a flash thread keeps live
// (accumulator, scores, row state): a proxy for register pressure.
func (l FlashLayout) Registers() int { return l.RM*l.DVN + l.RM*l.CN + 3*l.RM }

func isPow2(x int) bool { return x > 0 && x&(x-1) == 0 }

// MaxButterfly is the most lanes params.glsl's BUTTERFLY reduces over.
const MaxButterfly = 64

// MaxBiasSpan bounds a dK/dV key tile: ext.glsl's bias_next_query_tile
// ORs two summary words (512 keys each), so keys c0 … c1 must satisfy
// c1 − c0 < 512.
const MaxBiasSpan = 512

// FlashFwdLayout derives flash's thread layout and checks its requirements.
func FlashFwdLayout(c Config, dv, subgroup int) (FlashLayout, error) {
	if !isPow2(c.WG) || !isPow2(c.BC) || !isPow2(subgroup) {
		return FlashLayout{}, fmt.Errorf("shaders: flash needs power-of-two WG, BC and subgroup (got %d, %d, %d)", c.WG, c.BC, subgroup)
	}
	if c.WG%subgroup != 0 {
		return FlashLayout{}, fmt.Errorf("shaders: flash WG %d is not a multiple of the subgroup size %d", c.WG, subgroup)
	}
	tc := min(max(c.BC/4, 1), subgroup)
	if tc > MaxButterfly {
		return FlashLayout{}, fmt.Errorf("shaders: flash BC %d puts %d threads on a row; its row reductions span at most %d", c.BC, tc, MaxButterfly)
	}
	l := FlashLayout{TC: tc, TR: c.WG / tc, CN: c.BC / tc, DVN: ceilDiv(dv, tc)}
	if c.WG < tc || c.BR < l.TR || c.BR%l.TR != 0 {
		return FlashLayout{}, fmt.Errorf("shaders: flash BR %d must be a positive multiple of WG/TC = %d", c.BR, l.TR)
	}
	l.RM = c.BR / l.TR
	return l, nil
}

// BwdLayout is the thread layout of bwd_dkdv (rows = key rows, BC) or
// bwd_dq (rows = query rows, BR): TX threads per row, M rows per thread.
type BwdLayout struct {
	TX int // threads per row: max(WG/rows, 1)
	T  int // row groups: WG/TX
	M  int // rows per thread: rows/T
}

// BwdTileLayout derives the thread layout of bwd_dkdv (rows = its BC key
// rows) or bwd_dq (rows = its BR query rows) for a workgroup of wg.
func BwdTileLayout(wg, rows int) (BwdLayout, error) {
	if !isPow2(wg) || !isPow2(rows) {
		return BwdLayout{}, fmt.Errorf("shaders: backward kernels need power-of-two WG and tile rows (got %d, %d)", wg, rows)
	}
	tx := max(wg/rows, 1)
	l := BwdLayout{TX: tx, T: wg / tx}
	l.M = rows / l.T
	return l, nil
}

// CheckConfig checks c for kernel (an addressed variant as its base) on a
// device with limits lim and head dims d, dv (f16: the storage type).
func CheckConfig(kernel string, c Config, d, dv int, f16 bool, lim Limits) error {
	if d < 1 || dv < 1 || d > MaxHeadDim || dv > MaxHeadDim {
		return fmt.Errorf("shaders: head dims D=%d DV=%d outside 1 … %d", d, dv, MaxHeadDim)
	}
	if c.WG < 1 || (lim.MaxWorkgroupSize > 0 && c.WG > lim.MaxWorkgroupSize) {
		return fmt.Errorf("shaders: workgroup size %d outside 1 … %d", c.WG, lim.MaxWorkgroupSize)
	}
	if c.BR < 1 || c.BC < 1 {
		return fmt.Errorf("shaders: tile %d×%d must be positive", c.BR, c.BC)
	}
	shared := 0
	switch BaseKernel(kernel) {
	case KernelNaive:
		if !isPow2(c.WG) {
			return fmt.Errorf("shaders: naive needs a power-of-two WG (got %d)", c.WG)
		}
		shared = NaiveSharedBytes(c.WG, d)
	case KernelMinimal:
		if c.WG < c.BR {
			return fmt.Errorf("shaders: minimal needs WG ≥ BR (got %d < %d)", c.WG, c.BR)
		}
		shared = MinimalSharedBytes(c.BR, c.BC, d, dv, f16)
	case KernelFlash:
		if _, err := FlashFwdLayout(c, dv, lim.Subgroup); err != nil {
			return err
		}
		shared = FlashFwdSharedBytes(c.BR, c.BC, d, dv, f16)
	case KernelBwdPre:
		if !isPow2(lim.Subgroup) || c.WG%lim.Subgroup != 0 || c.WG%c.BR != 0 {
			return fmt.Errorf("shaders: bwd_pre needs WG a multiple of the subgroup size %d and of BR %d (got WG %d)", lim.Subgroup, c.BR, c.WG)
		}
		if tpr := c.WG / c.BR; !isPow2(tpr) || tpr > min(lim.Subgroup, MaxButterfly) {
			return fmt.Errorf("shaders: bwd_pre needs WG/BR a power of two ≤ the subgroup size %d and ≤ %d (got %d)", lim.Subgroup, MaxButterfly, tpr)
		}
	case KernelBwdDKDV:
		if _, err := BwdTileLayout(c.WG, c.BC); err != nil {
			return err
		}
		if c.BC > MaxBiasSpan {
			return fmt.Errorf("shaders: bwd_dkdv BC %d: a key tile spans at most %d keys (the bias summary's scan reads two words of 512)", c.BC, MaxBiasSpan)
		}
		if !isPow2(c.BR) {
			return fmt.Errorf("shaders: bwd_dkdv needs a power-of-two BR (got %d)", c.BR)
		}
		shared = BwdDKDVSharedBytes(c.BR, c.BC, d, dv, f16)
	case KernelBwdDQ:
		if _, err := BwdTileLayout(c.WG, c.BR); err != nil {
			return err
		}
		if !isPow2(c.BC) {
			return fmt.Errorf("shaders: bwd_dq needs a power-of-two BC (got %d)", c.BC)
		}
		shared = BwdDQSharedBytes(c.BR, c.BC, d, dv, f16)
	default:
		return fmt.Errorf("shaders: unknown kernel %q", kernel)
	}
	if lim.Dropout && (kernel == KernelFlash || kernel == KernelBwdDKDV || kernel == KernelBwdDQ) {
		if err := CheckDropKeys(c.BC); err != nil {
			return fmt.Errorf("shaders: %s tile: %w", kernel, err)
		}
		shared += DropSharedBytes(c.BR, c.BC) - DropPlaceholder
	}
	if lim.SharedBytes > 0 && shared > lim.SharedBytes {
		return fmt.Errorf("shaders: %s tile WG=%d BR=%d BC=%d D=%d DV=%d needs %d bytes of shared memory, the device has %d",
			kernel, c.WG, c.BR, c.BC, d, dv, shared, lim.SharedBytes)
	}
	return nil
}

// SpecEntry is one specialization constant value.
type SpecEntry struct {
	ID    uint32
	Value uint32
}

// SpecEntries returns the specialization constants of kernel (a base or
// addressed name) for Config c, head dims d, dv, the device's subgroup
// size, (naive only) the pass 0, 1 or 2 and (ExtKernels) the extended
// variant's ExtSpec, in ID order, limited to the IDs the kernel declares.
func SpecEntries(kernel string, c Config, d, dv, subgroup, pass int, ext uint32) ([]SpecEntry, error) {
	ids, err := SpecIDs(kernel)
	if err != nil {
		return nil, err
	}
	val := map[uint32]uint32{
		SpecWorkgroupSize: uint32(c.WG),
		SpecD:             uint32(d),
		SpecDV:            uint32(dv),
		SpecBR:            uint32(c.BR),
		SpecBC:            uint32(c.BC),
		SpecSubgroup:      uint32(subgroup),
		SpecPass:          uint32(pass),
		SpecExt:           ext,
	}
	out := make([]SpecEntry, len(ids))
	for i, id := range ids {
		out[i] = SpecEntry{ID: id, Value: val[id]}
	}
	return out, nil
}

// LavapipeLoopLimit is the number of loop iterations after which lavapipe
// (Mesa's gallivm, LP_MAX_TGSI_LOOP_ITERATIONS) silently ends every loop of
// a shader invocation, all loops together: a kernel whose LoopIterations
// exceeds it computes wrong results there. Other drivers have no such limit.
const LavapipeLoopLimit = 65535

// loopUnroll is UNROLL of params.glsl.
const loopUnroll = 8

// LoopIterations returns an upper bound of the loop iterations one
// invocation of kernel runs for Config c, head dims d, dv, nq queries,
// nk keys and group query heads per key/value head (naive: the largest of
// its three passes; an addressed variant as its base). Compare it with
// LavapipeLoopLimit on lavapipe.
func LoopIterations(kernel string, c Config, d, dv, nq, nk, group int) int {
	u := func(n int) int { return ceilDiv(max(n, 0), loopUnroll) }
	strided := func(n int) int { return ceilDiv(n, max(c.WG, 1)*loopUnroll) }
	wg := max(c.WG, 1)
	log2 := 0
	for x := wg; x > 1; x >>= 1 {
		log2++
	}
	// A loop that runs k iterations costs lavapipe k+1 (its last test).
	switch BaseKernel(kernel) {
	case KernelNaive:
		p0 := 1 + ceilDiv(d, wg) + ceilDiv(nk, wg)*(2+u(d))
		p1 := 3*(1+ceilDiv(nk, wg)) + 2*(1+log2)
		p2 := 1 + ceilDiv(dv, wg)*(2+u(nk))
		return max(p0, p1, p2)
	case KernelMinimal:
		n := min(c.BC, nk) // keys of a tile a row scores
		perTile := 1 + (1 + strided(c.BC*d)) + (1 + strided(c.BC*dv)) + 1 + n*(2+u(d)) + (1 + u(dv)) + 1 + n*(2+u(dv))
		return 2*(1+u(dv)) + 1 + ceilDiv(nk, max(c.BC, 1))*perTile
	case KernelFlash:
		perTile := 1 + (1 + strided(c.BC*d)) + (1 + u(d)) + (1 + strided(c.BC*dv)) + (1 + c.BC)
		return 1 + strided(c.BR*d) + 1 + ceilDiv(nk, max(c.BC, 1))*perTile
	case KernelBwdPre:
		return 1
	case KernelBwdDKDV:
		perTile := 1 + (1 + strided(c.BR*d)) + (1 + strided(c.BR*dv)) + (1 + ceilDiv(c.BR, wg)) + (1 + u(d)) + (1 + u(dv)) + (1 + c.BR)
		return 2 + strided(c.BC*d) + strided(c.BC*dv) + 1 + group*(2+ceilDiv(nq, max(c.BR, 1))*perTile)
	case KernelBwdDQ:
		perTile := 1 + (1 + strided(c.BC*d)) + (1 + strided(c.BC*dv)) + (1 + u(d)) + (1 + u(dv)) + (1 + c.BC)
		return 3 + strided(c.BR*d) + strided(c.BR*dv) + ceilDiv(c.BR, wg) + 1 + ceilDiv(nk, max(c.BC, 1))*perTile
	}
	return 0
}
