//go:build amd64 && !purego

package cpu

import "math"

// AVX2+FMA kernels (kernels_amd64.s), used when the CPU and the OS support
// them. Each wrapper checks that the memory the assembly touches lies
// inside its slices (the first and last row of every operand), hands the
// vector-friendly part to the assembly and leaves the rest to the caller or
// to scalar code.

var useSIMD = hasAVX2FMA()

func cpuid(eaxArg, ecxArg uint32) (eax, ebx, ecx, edx uint32)
func xgetbv() (eax, edx uint32)

//go:noescape
func dotTileAVX(dst *float32, ldd int, a *float32, lda, na int, b *float32, ldb, nb, n int)

//go:noescape
func accTileAVX(c *float32, ldc int, a *float32, lda, m, k int, b *float32, ldb, w int)

//go:noescape
func expRowAVX(r *float32, n int, c, sub float32) float32

//go:noescape
func probRowAVX(r, sub *float32, n int, c float32)

//go:noescape
func dsRowAVX(p, dp *float32, n int, d float32)

//go:noescape
func dsRowVecAVX(p, dp, d *float32, n int)

//go:noescape
func rowMaxMinAVX(r *float32, n int) (mx, mn float32)

//go:noescape
func capRowAVX(r, soft *float32, n int, k, c, slope float32, off, step int32) (mx float32)

//go:noescape
func biasRowAVX(r *float32, n int, k, slope float32, off, step int32) (mx float32)

//go:noescape
func addBiasAVX(r, bias *float32, n int, k float32) (mx float32)

//go:noescape
func dsRowSoftAVX(p, dp, soft *float32, n int, d float32)

//go:noescape
func dsRowVecSoftAVX(p, dp, d, soft *float32, n int)

//go:noescape
func scaleRowAVX(a *float32, n int, s float32)

//go:noescape
func dropRowAVX(r *float32, bits *uint32, n int, f0, f1 float32)

//go:noescape
func dropColAVX(dst, src *float32, bits *uint8, n int, bit uint32, f0, f1 float32)

//go:noescape
func philoxAVX(bits *[8]uint32, keys *[10][2]uint32, grp, i, c2, c3, below uint32)

// hasAVX2FMA reports AVX2 and FMA support, with the YMM state enabled by
// the OS.
func hasAVX2FMA() bool {
	maxID, _, _, _ := cpuid(0, 0)
	if maxID < 7 {
		return false
	}
	_, _, ecx1, _ := cpuid(1, 0)
	const fma, osxsave, avx = 1 << 12, 1 << 27, 1 << 28
	if ecx1&(fma|osxsave|avx) != fma|osxsave|avx {
		return false
	}
	if xcr0, _ := xgetbv(); xcr0&6 != 6 { // XMM and YMM state
		return false
	}
	_, ebx7, _, _ := cpuid(7, 0)
	return ebx7&(1<<5) != 0 // AVX2
}

func dotTileSIMD(dst []float32, ldd int, a rows, na int, b rows, nb int, w int) bool {
	if !useSIMD || w < 8 {
		return false
	}
	na2, nb4, w8 := na&^1, nb&^3, w&^7
	if na2 > 0 && nb4 > 0 {
		_, _ = a.row(0, w), a.row(na2-1, w)
		_, _ = b.row(0, w), b.row(nb4-1, w)
		_ = dst[(na2-1)*ldd+nb4-1]
		dotTileAVX(&dst[0], ldd, &a.buf[a.off], a.stride, na2, &b.buf[b.off], b.stride, nb4, w8)
		if w8 < w {
			for i := range na2 {
				ar := a.row(i, w)[w8:]
				d := dst[i*ldd : i*ldd+nb4]
				for j := range d {
					d[j] += dot(ar, b.row(j, w)[w8:])
				}
			}
		}
	} else {
		nb4 = 0
	}
	// Columns beyond the last multiple of 4, then the odd last row.
	for i := range na2 {
		ar := a.row(i, w)
		for j := nb4; j < nb; j++ {
			dst[i*ldd+j] = dot(ar, b.row(j, w))
		}
	}
	for i := na2; i < na; i++ {
		ar := a.row(i, w)
		for j := range nb {
			dst[i*ldd+j] = dot(ar, b.row(j, w))
		}
	}
	return true
}

func accTileSIMD(acc []float32, lda int, p []float32, ldp, nr, nk int, v rows, w int) bool {
	if !useSIMD || w < 8 {
		return false
	}
	w8 := w &^ 7
	_ = acc[(nr-1)*lda+w-1]
	_ = p[(nr-1)*ldp+nk-1]
	_, _ = v.row(0, w), v.row(nk-1, w)
	accTileAVX(&acc[0], lda, &p[0], ldp, nr, nk, &v.buf[v.off], v.stride, w8)
	if w8 < w {
		for i := range nr {
			a := acc[i*lda+w8 : i*lda+w]
			for j, pj := range p[i*ldp : i*ldp+nk] {
				if math.Float32bits(pj) == 0 { // +0: masked (−0, dropped, multiplies)
					continue
				}
				vr := v.row(j, w)[w8:]
				vr = vr[:len(a)]
				for c := range a {
					a[c] += pj * vr[c]
				}
			}
		}
	}
	return true
}

// simdLen returns how many of n elements the row kernels take: n rounded
// down to a multiple of 8, none while useSIMD is off.
func simdLen(n int) int {
	if !useSIMD {
		return 0
	}
	return n &^ 7
}

func expRowSIMD(r []float32, c, sub float32) (int, float32) {
	n := simdLen(len(r))
	if n == 0 {
		return 0, 0
	}
	return n, expRowAVX(&r[0], n, c, sub)
}

func probRowSIMD(r, sub []float32, c float32) int {
	n := simdLen(min(len(r), len(sub)))
	if n > 0 {
		probRowAVX(&r[0], &sub[0], n, c)
	}
	return n
}

func dsRowSIMD(p, dp []float32, d float32) int {
	n := simdLen(min(len(p), len(dp)))
	if n > 0 {
		dsRowAVX(&p[0], &dp[0], n, d)
	}
	return n
}

func dsRowVecSIMD(p, dp, d []float32) int {
	n := simdLen(min(len(p), len(dp), len(d)))
	if n > 0 {
		dsRowVecAVX(&p[0], &dp[0], &d[0], n)
	}
	return n
}

func rowMaxMinSIMD(r []float32) (n int, mx, mn float32) {
	n = simdLen(len(r))
	if n == 0 {
		return 0, 0, 0
	}
	mx, mn = rowMaxMinAVX(&r[0], n)
	return n, mx, mn
}

// distLen returns how many of the n elements of a row the distance kernels
// (capRow, biasRow) take: simdLen(n), or none when a distance |off + x·step|
// of theirs would not fit their int32 lanes.
func distLen(n, off, step int) int {
	n = simdLen(n)
	in32 := func(d int) bool { return d > math.MinInt32 && d <= math.MaxInt32 }
	if n == 0 || !in32(off) || !in32(off+(n-1)*step) {
		return 0
	}
	return n
}

func capRowSIMD(r, soft []float32, k, c, slope float32, off, step int) (int, float32) {
	n := distLen(len(r), off, step)
	if n == 0 {
		return 0, negInf
	}
	var sp *float32
	if soft != nil {
		_ = soft[n-1]
		sp = &soft[0]
	}
	return n, capRowAVX(&r[0], sp, n, k, c, slope, int32(off), int32(step))
}

func biasRowSIMD(r []float32, k, slope float32, off, step int) (int, float32) {
	n := distLen(len(r), off, step)
	if n == 0 {
		return 0, negInf
	}
	return n, biasRowAVX(&r[0], n, k, slope, int32(off), int32(step))
}

func addBiasSIMD(r, bias []float32, k float32) (int, float32) {
	n := simdLen(min(len(r), len(bias)))
	if n == 0 {
		return 0, negInf
	}
	return n, addBiasAVX(&r[0], &bias[0], n, k)
}

func dsRowSoftSIMD(p, dp, soft []float32, d float32) int {
	n := simdLen(min(len(p), len(dp), len(soft)))
	if n > 0 {
		dsRowSoftAVX(&p[0], &dp[0], &soft[0], n, d)
	}
	return n
}

func dsRowVecSoftSIMD(p, dp, d, soft []float32) int {
	n := simdLen(min(len(p), len(dp), len(d), len(soft)))
	if n > 0 {
		dsRowVecSoftAVX(&p[0], &dp[0], &d[0], &soft[0], n)
	}
	return n
}

// philoxSIMD sets bits[x] to the keep bits of the Philox4x32-10 block of
// counter (g+x, i, c2, c3) for x < 8, 16 keys each (philoxAVX), unless
// useSIMD is off.
func philoxSIMD(bits *[8]uint32, keys *[10][2]uint32, g, i, c2, c3, thr uint32) bool {
	if !useSIMD {
		return false
	}
	philoxAVX(bits, keys, g, i, c2, c3, thr-1)
	return true
}

// dropRowSIMD multiplies r[j] by f[bit j mod 8 of bits[j/8]] for j <
// len(r), a multiple of 8 (dropRowAVX), unless useSIMD is off.
func dropRowSIMD(r []float32, bits []uint32, f *[2]float32) bool {
	if !useSIMD {
		return false
	}
	n := len(r)
	_ = bits[n/8-1]
	dropRowAVX(&r[0], &bits[0], n, f[0], f[1])
	return true
}

// dropColSIMD sets dst[i] = src[i]·f[bits[i]>>e & 1] for i < n =
// len(dst) rounded down to a multiple of 8 (dropColAVX) and returns n,
// none while useSIMD is off.
func dropColSIMD(dst, src []float32, bits []uint8, e uint, f *[2]float32) int {
	n := simdLen(len(dst))
	if n > 0 {
		_, _ = src[n-1], bits[n-1]
		dropColAVX(&dst[0], &src[0], &bits[0], n, 1<<e, f[0], f[1])
	}
	return n
}

func scaleRowSIMD(a []float32, s float32) int {
	n := simdLen(len(a))
	if n > 0 {
		scaleRowAVX(&a[0], n, s)
	}
	return n
}
