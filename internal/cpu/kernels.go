package cpu

import "math"

// rows addresses n rows of width w in buf: row r starts at off + r*stride.
type rows struct {
	buf    []float32
	off    int
	stride int
}

// row returns row r, exactly w long (capacity capped so that the kernels'
// length facts are exact for the bounds-check eliminator).
func (a rows) row(r, w int) []float32 {
	o := a.off + r*a.stride
	return a.buf[o : o+w : o+w]
}

// dotTileGo sets dst[i*ldd+j] = a_i · b_j for i < na, j < nb, the rows being w
// long. The block is computed 2×4 at a time: eight independent float32
// accumulators, one load of each a and b element per eight products.
func dotTileGo(dst []float32, ldd int, a rows, na int, b rows, nb int, w int) {
	i := 0
	for ; i+2 <= na; i += 2 {
		a0 := a.row(i, w)
		a1 := a.row(i+1, w)
		d0 := dst[i*ldd : i*ldd+nb]
		d1 := dst[(i+1)*ldd : (i+1)*ldd+nb]
		j := 0
		for ; j+4 <= nb; j += 4 {
			b0 := b.row(j, w)
			b1 := b.row(j+1, w)
			b2 := b.row(j+2, w)
			b3 := b.row(j+3, w)
			var s00, s01, s02, s03, s10, s11, s12, s13 float32
			a1 := a1[:len(a0)]
			b0 = b0[:len(a0)]
			b1 = b1[:len(a0)]
			b2 = b2[:len(a0)]
			b3 = b3[:len(a0)]
			for t, x0 := range a0 {
				x1 := a1[t]
				y0, y1, y2, y3 := b0[t], b1[t], b2[t], b3[t]
				s00 += x0 * y0
				s01 += x0 * y1
				s02 += x0 * y2
				s03 += x0 * y3
				s10 += x1 * y0
				s11 += x1 * y1
				s12 += x1 * y2
				s13 += x1 * y3
			}
			d0[j], d0[j+1], d0[j+2], d0[j+3] = s00, s01, s02, s03
			d1[j], d1[j+1], d1[j+2], d1[j+3] = s10, s11, s12, s13
		}
		for ; j < nb; j++ {
			b0 := b.row(j, w)
			d0[j] = dot(a0, b0)
			d1[j] = dot(a1, b0)
		}
	}
	if i < na {
		a0 := a.row(i, w)
		d0 := dst[i*ldd : i*ldd+nb]
		for j := range d0 {
			d0[j] = dot(a0, b.row(j, w))
		}
	}
}

// dot returns x·y (len(y) ≥ len(x)) with four accumulators.
func dot(x, y []float32) float32 {
	y = y[:len(x)]
	var s0, s1, s2, s3 float32
	t := 0
	for ; t+4 <= len(x); t += 4 {
		s0 += x[t] * y[t]
		s1 += x[t+1] * y[t+1]
		s2 += x[t+2] * y[t+2]
		s3 += x[t+3] * y[t+3]
	}
	for ; t < len(x); t++ {
		s0 += x[t] * y[t]
	}
	return (s0 + s1) + (s2 + s3)
}

// accTileGo adds p·V to acc: acc[i*lda+c] += Σ_j p[i*ldp+j] · v_j[c] for
// i < nr, j < nk, c < w. Four keys are folded per pass over an acc row;
// groups of four +0 probabilities (masked keys) are skipped, while −0 (a
// dropped probability) is multiplied like any other: 0·NaN = NaN.
func accTileGo(acc []float32, lda int, p []float32, ldp, nr, nk int, v rows, w int) {
	for i := 0; i < nr; i++ {
		a := acc[i*lda : i*lda+w]
		pr := p[i*ldp : i*ldp+nk]
		j := 0
		for ; j+4 <= nk; j += 4 {
			p0, p1, p2, p3 := pr[j], pr[j+1], pr[j+2], pr[j+3]
			if math.Float32bits(p0)|math.Float32bits(p1)|math.Float32bits(p2)|math.Float32bits(p3) == 0 {
				continue
			}
			v0 := v.row(j, w)
			v1 := v.row(j+1, w)
			v2 := v.row(j+2, w)
			v3 := v.row(j+3, w)
			v0 = v0[:len(a)]
			v1 = v1[:len(a)]
			v2 = v2[:len(a)]
			v3 = v3[:len(a)]
			for c := range a {
				a[c] += (p0*v0[c] + p1*v1[c]) + (p2*v2[c] + p3*v3[c])
			}
		}
		for ; j < nk; j++ {
			p0 := pr[j]
			if math.Float32bits(p0) == 0 {
				continue
			}
			v0 := v.row(j, w)
			v0 = v0[:len(a)]
			for c := range a {
				a[c] += p0 * v0[c]
			}
		}
	}
}

// exp2 coefficients: Taylor series of 2^f = e^(f·ln2) to degree 7, relative
// error below 1e-8 for |f| ≤ 1/2 (float32 rounding dominates).
const (
	e1 = 0.6931471805599453
	e2 = 0.2402265069591007
	e3 = 0.05550410866482158
	e4 = 0.009618129107628477
	e5 = 0.0013333558146428443
	e6 = 0.00015403530393381606
	e7 = 1.525273380405984e-05

	// roundMagic is 1.5·2^23: x + roundMagic rounds x to an integer held in
	// the low mantissa bits.
	roundMagic     = 12582912.0
	roundMagicBits = 0x4B400000
)

// exp2 returns 2^x in float32. Arguments below −126 (−Inf included) give
// 0, above 127 are clamped; NaN propagates.
func exp2(x float32) float32 {
	if x < -126 {
		return 0
	}
	x = min(x, 127)
	t := x + roundMagic
	f := x - (t - roundMagic)
	q := ((((((e7*f+e6)*f+e5)*f+e4)*f+e3)*f+e2)*f+e1)*f + 1
	// The low bits of t hold round(x) + roundMagicBits; rebias to 127.
	return q * math.Float32frombits((math.Float32bits(t)-(roundMagicBits-127))<<23)
}

// useSIMD selects the vector kernels (set at start-up where the CPU has
// them; the tests clear it to exercise the portable path). The *SIMD
// functions of the per-architecture files process a prefix of their
// operands, or the whole tile, and report how far they got: nothing when
// useSIMD is off.

// dotTile sets dst[i*ldd+j] = a_i · b_j for i < na, j < nb, the rows being
// w long.
func dotTile(dst []float32, ldd int, a rows, na int, b rows, nb int, w int) {
	if dotTileSIMD(dst, ldd, a, na, b, nb, w) {
		return
	}
	dotTileGo(dst, ldd, a, na, b, nb, w)
}

// accTile adds p·V to acc: acc[i*lda+c] += Σ_j p[i*ldp+j] · v_j[c] for
// i < nr, j < nk, c < w.
func accTile(acc []float32, lda int, p []float32, ldp, nr, nk int, v rows, w int) {
	if nr == 0 || nk == 0 {
		return
	}
	if accTileSIMD(acc, lda, p, ldp, nr, nk, v, w) {
		return
	}
	accTileGo(acc, lda, p, ldp, nr, nk, v, w)
}

// expRow sets r[j] = 2^(r[j]·c − sub) and returns the sum of the results.
func expRow(r []float32, c, sub float32) float32 {
	n, sum := expRowSIMD(r, c, sub)
	for j := n; j < len(r); j++ {
		e := exp2(r[j]*c - sub)
		r[j] = e
		sum += e
	}
	return sum
}

// probRow sets r[j] = P = 2^snap(r[j]·c − sub[j], sub[j]), the backward's
// probabilities from the scores r and the rows' LSE·log2e in sub (len(sub)
// ≥ len(r)).
func probRow(r, sub []float32, c float32) {
	sub = sub[:len(r)]
	for j := probRowSIMD(r, sub, c); j < len(r); j++ {
		r[j] = exp2(snap(r[j]*c-sub[j], sub[j]))
	}
}

// snapTol is 2^-21: snap's noise band, relative to |l2|.
const snapTol = 0x1p-21

// snap returns the exponent x = s·c − l2 of a probability that is at most
// 1 in exact arithmetic: 0 (P = 1) where x > 0, which only rounding makes,
// and where |x| ≤ 2^-21·|l2|, a few fp32 ulps of l2: the rounding noise of
// the row's maximum itself, so that scores beyond fp32's resolution (huge
// scales) give the forward's one-hot softmax instead of 2^±noise = 0 or
// Inf. The band is finite even for l2 = +Inf (a dead row, whose x is −Inf
// or NaN); NaN stays NaN. The shaders' prob (params.glsl) is the same rule.
func snap(x, l2 float32) float32 {
	tol := min(float32(math.Abs(float64(l2))*snapTol), math.MaxFloat32)
	if x > 0 || float32(math.Abs(float64(x))) <= tol {
		return 0
	}
	return x
}

// dsRow sets dp[j] = p[j]·(dp[j] − d) (len(dp) ≥ len(p)).
func dsRow(p, dp []float32, d float32) {
	dp = dp[:len(p)]
	for j := dsRowSIMD(p, dp, d); j < len(p); j++ {
		dp[j] = p[j] * (dp[j] - d)
	}
}

// dsRowVec sets dp[j] = p[j]·(dp[j] − d[j]) (dp, d at least as long as p).
func dsRowVec(p, dp, d []float32) {
	dp = dp[:len(p)]
	d = d[:len(p)]
	for j := dsRowVecSIMD(p, dp, d); j < len(p); j++ {
		dp[j] = p[j] * (dp[j] - d[j])
	}
}

// dsRowSoft sets dp[j] = p[j]·(dp[j] − d)·soft[j] (dp, soft at least as
// long as p).
func dsRowSoft(p, dp, soft []float32, d float32) {
	dp = dp[:len(p)]
	soft = soft[:len(p)]
	for j := dsRowSoftSIMD(p, dp, soft, d); j < len(p); j++ {
		dp[j] = p[j] * (dp[j] - d) * soft[j]
	}
}

// dsRowVecSoft sets dp[j] = p[j]·(dp[j] − d[j])·soft[j] (dp, d, soft at
// least as long as p).
func dsRowVecSoft(p, dp, d, soft []float32) {
	dp = dp[:len(p)]
	d = d[:len(p)]
	soft = soft[:len(p)]
	for j := dsRowVecSoftSIMD(p, dp, d, soft); j < len(p); j++ {
		dp[j] = p[j] * (dp[j] - d[j]) * soft[j]
	}
}

// scaleRow sets a[x] *= s.
func scaleRow(a []float32, s float32) {
	for x := scaleRowSIMD(a, s); x < len(a); x++ {
		a[x] *= s
	}
}

// rowMaxMin returns the largest and smallest element of a non-empty r.
func rowMaxMin(r []float32) (mx, mn float32) {
	mx, mn = r[0], r[0]
	n := 0
	if k, a, b := rowMaxMinSIMD(r); k > 0 {
		n, mx, mn = k, a, b
	}
	for _, x := range r[n:] {
		mx = max(mx, x)
		mn = min(mn, x)
	}
	return mx, mn
}

// tanh coefficients: the odd Taylor series tanh a = a + a·z·p(z), z = a²,
// to degree 15 (the next term is below 5e-8 of tanh a for a < tanhPolyMax).
const (
	t3  = -1.0 / 3.0
	t5  = 2.0 / 15.0
	t7  = -17.0 / 315.0
	t9  = 62.0 / 2835.0
	t11 = -1382.0 / 155925.0
	t13 = 21844.0 / 6081075.0
	t15 = -929569.0 / 638512875.0

	tanhPolyMax = 0.55 // the polynomial below, 1 − 2/(e^2a + 1) above
	tanhOneMin  = 9    // 1 from here on (tanh a rounds to 1 from about 9.01)
)

// tanh32 returns tanh x in float32 to about an ulp: the Taylor polynomial
// for |x| < 0.55, 1 − 2/(2^(2|x|·log2e) + 1) up to 9 and 1 beyond (±Inf
// included), with x's sign (±0 gives ±0); NaN stays NaN. The shaders'
// ext_tanh (internal/shaders/ext.glsl) uses the branch-free form
// 1 − 2/(e^2a + 1) everywhere (a few ulps of 1 in absolute error near 0,
// where this polynomial is more accurate), with the same special values;
// both are well within the tolerance the scores need.
func tanh32(x float32) float32 {
	a := math.Float32frombits(math.Float32bits(x) &^ signBit)
	var t float32
	switch {
	case a < tanhPolyMax:
		z := a * a
		p := (((((t15*z+t13)*z+t11)*z+t9)*z+t7)*z+t5)*z + t3
		t = a*z*p + a
	case a < tanhOneMin:
		t = 1 - 2/(exp2(a*(2*math.Log2E))+1)
	case a >= tanhOneMin:
		t = 1
	default:
		return x // NaN
	}
	return math.Float32frombits(math.Float32bits(t) | math.Float32bits(x)&signBit)
}

// signBit is a float32's sign bit.
const signBit = 1 << 31

// capRow sets r[x] = c·tanh(k·r[x]) − slope·|off + x·step| (the
// softcapped score with ALiBi's distance penalty) and, when soft is not
// nil, soft[x] = 1 − tanh²(k·r[x]) (len(soft) ≥ len(r)). It returns the
// largest new r[x] (−Inf for an empty row; NaN may or may not win, as in
// rowMaxMin). The vector kernel fuses products and sums (FMA: the
// polynomials, the distance term, 1 − t²); the scalar code below rounds
// each step, computing 1 − t² as (1 − t)(1 + t).
func capRow(r, soft []float32, k, c, slope float32, off, step int) float32 {
	n, mx := capRowSIMD(r, soft, k, c, slope, off, step)
	if soft == nil {
		for x := n; x < len(r); x++ {
			r[x] = c*tanh32(k*r[x]) - slope*dist(off+x*step)
			mx = max(mx, r[x])
		}
		return mx
	}
	soft = soft[:len(r)]
	for x := n; x < len(r); x++ {
		t := tanh32(k * r[x])
		soft[x] = (1 - t) * (1 + t)
		r[x] = c*t - slope*dist(off+x*step)
		mx = max(mx, r[x])
	}
	return mx
}

// biasRow sets r[x] = k·r[x] − slope·|off + x·step| (a score with
// ALiBi's distance penalty) and returns the largest new r[x]
// (−Inf for an empty row; NaN may or may not win, as in rowMaxMin).
func biasRow(r []float32, k, slope float32, off, step int) float32 {
	n, mx := biasRowSIMD(r, k, slope, off, step)
	for x := n; x < len(r); x++ {
		r[x] = k*r[x] - slope*dist(off+x*step)
		mx = max(mx, r[x])
	}
	return mx
}

// addBias sets r[x] = k·r[x] + bias[x], or −Inf where bias[x] is −Inf
// (the bias hides the pair whatever r[x] holds: ±Inf, NaN), and returns
// the largest new r[x] (−Inf for an empty row; NaN may or may not win, as
// in rowMaxMin). len(bias) ≥ len(r). The vector kernel fuses k·r[x] +
// bias[x] (FMA); the scalar code rounds the product first (k = 1, after
// capRow or biasRow, rounds once either way).
func addBias(r, bias []float32, k float32) float32 {
	bias = bias[:len(r)]
	n, mx := addBiasSIMD(r, bias, k)
	for x := n; x < len(r); x++ {
		v := negInf
		if b := bias[x]; b != negInf {
			v = k*r[x] + b
		}
		r[x] = v
		mx = max(mx, v)
	}
	return mx
}

// addRow sets dst[x] += src[x] (len(src) ≥ len(dst)).
func addRow(dst, src []float32) {
	src = src[:len(dst)]
	for x, v := range src {
		dst[x] += v
	}
}

// mulRow sets dst[x] *= f[x] (len(f) ≥ len(dst)).
func mulRow(dst, f []float32) {
	f = f[:len(dst)]
	for x, v := range f {
		dst[x] *= v
	}
}

// negInf is −Inf in float32.
var negInf = float32(math.Inf(-1))

// dist returns |d| rounded to float32 (exact below 2^24).
func dist(d int) float32 {
	if d < 0 {
		d = -d
	}
	return float32(d)
}
