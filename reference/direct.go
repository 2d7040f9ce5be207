package reference

import "math"

// Non-finite inputs. Gonum's products skip zero factors, so for them the
// reference evaluates the formulas directly, in IEEE float64 and over
// exactly the keys each row sees: a product with a zero probability still
// multiplies (0·NaN = NaN, 0·Inf = NaN), a masked key is never read, and a
// row whose visible scores are all −Inf is empty (see the package doc).

// allFinite reports whether every element of every slice is finite.
func allFinite(xs ...[]float64) bool {
	for _, x := range xs {
		for _, v := range x {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return false
			}
		}
	}
	return true
}

// direct holds one (b, h) pair's rows, probabilities and LSE, evaluated
// element by element.
type direct struct {
	p        Params
	b, h, kh int
	q, k, v  []float64
	pm       [][]float64 // Nq×Nk, masked entries 0
	lse      []float64
}

func newDirect(p Params, q, k, v []float64, b, h int) *direct {
	d := &direct{p: p, b: b, h: h, kh: p.kvHead(h), q: q, k: k, v: v,
		pm: make([][]float64, p.Nq), lse: make([]float64, p.Nq)}
	scale := p.EffectiveScale()
	s := make([]float64, p.Nk)
	for i := range p.Nq {
		d.pm[i] = make([]float64, p.Nk)
		m := math.Inf(-1)
		for j := range p.Nk {
			if !p.Sees(b, h, i, j) {
				continue
			}
			s[j] = p.Score(b, h, i, j, scale*dot(d.qRow(i), d.kRow(j)))
			m = math.Max(m, s[j]) // NaN wins
		}
		if math.IsInf(m, -1) { // no key, or only −Inf scores: empty row
			d.lse[i] = m
			continue
		}
		sum := 0.0
		for j := range p.Nk {
			if p.Sees(b, h, i, j) {
				d.pm[i][j] = math.Exp(s[j] - m)
				sum += d.pm[i][j]
			}
		}
		for j := range p.Nk {
			if p.Sees(b, h, i, j) {
				d.pm[i][j] /= sum
			}
		}
		d.lse[i] = m + math.Log(sum)
	}
	return d
}

func dot(a, b []float64) float64 {
	s := 0.0
	for x := range a {
		s += a[x] * b[x]
	}
	return s
}

func (d *direct) qRow(i int) []float64 {
	off := ((d.b*d.p.Nq+i)*d.p.Hq + d.h) * d.p.D
	return d.q[off : off+d.p.D]
}

func (d *direct) kRow(j int) []float64 {
	off := ((d.b*d.p.Nk+j)*d.p.Hkv + d.kh) * d.p.D
	return d.k[off : off+d.p.D]
}

func (d *direct) vRow(j int) []float64 {
	off := ((d.b*d.p.Nk+j)*d.p.Hkv + d.kh) * d.p.Dv
	return d.v[off : off+d.p.Dv]
}

// sees reports whether row i reads key j: visible, and the row not empty.
func (d *direct) sees(i, j int) bool {
	return d.p.Sees(d.b, d.h, i, j) && !math.IsInf(d.lse[i], -1)
}

// forward adds the pair's O rows into o and copies its LSE into lse.
func (d *direct) forward(o, lse []float64) {
	p := d.p
	for i := range p.Nq {
		row := o[((d.b*p.Nq+i)*p.Hq+d.h)*p.Dv:][:p.Dv]
		for j := range p.Nk {
			if !d.sees(i, j) {
				continue
			}
			z := d.pm[i][j] * p.DropFactor(d.b, d.h, i, j)
			for c, x := range d.vRow(j) {
				row[c] += z * x
			}
		}
	}
	copy(lse[(d.b*p.Hq+d.h)*p.Nq:], d.lse)
}

// backward adds the pair's contributions to dq, dk, dv and (when not
// nil) the bias gradient db.
func (d *direct) backward(do, dq, dk, dv, db []float64) {
	p := d.p
	scale := p.EffectiveScale()
	dp := make([]float64, p.Nk)
	for i := range p.Nq {
		off := ((d.b*p.Nq+i)*p.Hq + d.h)
		doRow := do[off*p.Dv:][:p.Dv]
		dqRow := dq[off*p.D:][:p.D]
		di := 0.0
		for j := range p.Nk {
			if d.sees(i, j) {
				dp[j] = dot(doRow, d.vRow(j)) * p.DropFactor(d.b, d.h, i, j)
				di += dp[j] * d.pm[i][j]
			}
		}
		for j := range p.Nk {
			if !d.sees(i, j) {
				continue
			}
			koff := (d.b*p.Nk+j)*p.Hkv + d.kh
			ds := d.pm[i][j] * (dp[j] - di)
			if db != nil {
				db[p.Bias.index(d.b, d.h, i, j, p.Nk)] += ds
			}
			if p.Softcap > 0 {
				ds *= p.scoreGrad(scale * dot(d.qRow(i), d.kRow(j)))
			}
			z := d.pm[i][j] * p.DropFactor(d.b, d.h, i, j)
			for c, x := range doRow {
				dv[koff*p.Dv+c] += z * x
			}
			for c, x := range d.kRow(j) {
				dqRow[c] += scale * ds * x
			}
			for c, x := range d.qRow(i) {
				dk[koff*p.D+c] += scale * ds * x
			}
		}
	}
}
