package cpu

import (
	"context"
	"math"
	"slices"

	"github.com/flashvk/flashvk/internal/spec"
)

// BackwardWith is Backward with an explicit Config, for a problem without
// a bias (spec.Ext.Bias; see BackwardBias). The result is bitwise
// independent of cfg.Workers.
func BackwardWith(ctx context.Context, cfg Config, p *spec.Problem, q, k, v, o, lse, do, dq, dk, dv []float32) error {
	return BackwardBias(ctx, cfg, p, q, k, v, o, lse, do, dq, dk, dv, Bias{})
}

// BackwardBias is BackwardWith for any problem: x holds the bias of a
// problem with spec.Ext.Bias (x.Bias, indexed by spec.Bias.At) and, when
// the bias has Grad, the dBias output (x.DBias, indexed by
// spec.Bias.GradAt: every element its view addresses is overwritten, 0
// where no pair contributes); it is the zero Bias otherwise. The result,
// dBias included, is bitwise independent of cfg.Workers.
func BackwardBias(ctx context.Context, cfg Config, p *spec.Problem, q, k, v, o, lse, do, dq, dk, dv []float32, x Bias) error {
	if err := checkProblem(p); err != nil {
		return err
	}
	if err := checkOperands(p, lse, operand{"q", q, asQ}, operand{"k", k, asK}, operand{"v", v, asV}, operand{"o", o, asO},
		operand{"do", do, asO}, operand{"dq", dq, asQ}, operand{"dk", dk, asK}, operand{"dv", dv, asV}); err != nil {
		return err
	}
	if err := checkBias(p, x, true); err != nil {
		return err
	}
	if p.B == 0 {
		return ctx.Err()
	}
	cfg = cfg.resolve(p)
	g := &bwd{ctx: ctx, p: p, cfg: cfg, q: q, k: k, v: v, o: o, do: do, dq: dq, dk: dk, dv: dv, bias: x.Bias,
		db: dbOutput(p, x.DBias), qTiles: queryTiling(p, cfg.Br), kTiles: newTiling(p, cfg.Bc, p.Hkv, true, false)}
	n := p.LSELen()

	// (1) D = rowsum(dO∘O), and LSE in base 2 with an empty row's turned
	// into +Inf so that exp2(s − lse2) is 0 without a branch: −Inf (the row
	// sees no key), and, as the shaders' lse_in, an LSE whose base-2 value
	// is not a finite float32 (+Inf: P = e^(s−∞) = 0; beyond ±2.3587e38,
	// outside the range the kernels compute in).
	g.delta = make([]float32, n)
	g.lse2 = make([]float32, n)
	for i, x := range lse[:n] {
		l2 := float32(float64(x) * math.Log2E)
		if math.IsInf(float64(l2), 0) {
			l2 = float32(math.Inf(1))
		}
		g.lse2[i] = l2
	}
	err := parallel(ctx, cfg.Workers, g.qTiles.items(), func() struct{} { return struct{}{} }, g.deltaItem)
	if err != nil {
		return err
	}
	if g.db.buf != nil { // the dQ pass adds dS into a zeroed dBias
		if err := clearDBias(ctx, cfg.Workers, p, g.db); err != nil {
			return err
		}
	}
	if g.kTiles.items() > 0 {
		// (2) dK, dV per (batch, kv head, key tile).
		err = parallel(ctx, cfg.Workers, g.kTiles.items(), g.newKVScratch, g.kvItem)
		if err != nil {
			return err
		}
	}
	// (3) dQ per (batch, query head, query tile), adding dS into dBias:
	// each item into its own rows, unless dBias folds (see foldPlan).
	if g.db.buf == nil || !p.Ext.Bias.GradFolds(p.B, p.Hq, p.Nq) {
		return parallel(ctx, cfg.Workers, g.qTiles.items(), g.newQScratch, func(w *qScratch, it int) { g.qItem(w, it, g.db) })
	}
	f := newFoldPlan(p, g.qTiles, cfg.Br)
	err = parallel(ctx, cfg.Workers, len(f.units), g.newQScratch, func(w *qScratch, u int) {
		unit := &f.units[u]
		db := f.target(unit, g.db)
		for _, it := range unit.items {
			g.qItem(w, it, db)
		}
	})
	if err != nil {
		return err
	}
	return f.reduce(ctx, cfg.Workers, g.db)
}

type bwd struct {
	ctx            context.Context // checked between tiles
	p              *spec.Problem
	cfg            Config
	q, k, v, o, do []float32
	dq, dk, dv     []float32
	bias           []float32 // spec.Ext.Bias's elements (nil: none)
	db             dbRows    // dBias (nil buf: none)
	delta, lse2    []float32 // as LSE: [B, Hq, Nq] (packed: [Hq, Tq])
	qTiles         *tiling   // query tiles × query heads (D and dQ passes)
	kTiles         *tiling   // key tiles × kv heads (dK/dV pass)
}

// deltaItem computes D for one (batch, head, query tile), accumulating in
// float64.
func (g *bwd) deltaItem(_ struct{}, it int) {
	p := g.p
	b, h, i0, nr := g.qTiles.at(it)
	or := rows{g.o, p.QOffset(p.O, b, i0, h), p.O.Seq}
	dor := rows{g.do, p.QOffset(p.O, b, i0, h), p.O.Seq}
	for i := range nr {
		if dead(g.lse2[p.LSEIndex(b, h, i0+i)]) {
			g.delta[p.LSEIndex(b, h, i0+i)] = 0
			continue
		}
		x, y := or.row(i, p.Dv), dor.row(i, p.Dv)
		y = y[:len(x)]
		var s float64
		for c, xc := range x {
			s += float64(xc) * float64(y[c])
		}
		g.delta[p.LSEIndex(b, h, i0+i)] = float32(s)
	}
}

// kvScratch is one worker's memory for the dK/dV pass. Scores are kept
// transposed (key-major) so that dV += Pᵀ·dO and dK += dSᵀ·Q are the same
// row-axpy kernel as the forward's P·V.
type kvScratch struct {
	st, dpt      []float32 // Bc×Br: Sᵀ then Pᵀ, dPᵀ then dSᵀ
	soft         []float32 // Bc×Br: the softcap's derivative (nil without one)
	dk, dv       []float32 // Bc×D, Bc×Dv accumulators
	first, limit []int     // Bc: the query rows that see each key (queryRows)
	q, do        []float32 // Br×D, Br×Dv: a query tile with its dead rows zeroed
	bcol         []float32 // Br: a key's bias over a query tile's rows (nil without a bias)
	// With dropout: pt is Bc×Br, Pᵀ∘keep (dV's factor), and bits the
	// tile's keep bits, ng groups of Br rows (nil without dropout).
	pt   []float32
	bits []uint8
	ng   int
}

func (g *bwd) newKVScratch() *kvScratch {
	br, bc := g.cfg.Br, g.cfg.Bc
	w := &kvScratch{
		st:    make([]float32, bc*br),
		dpt:   make([]float32, bc*br),
		soft:  g.softTile(),
		dk:    make([]float32, bc*g.p.D),
		dv:    make([]float32, bc*g.p.Dv),
		first: make([]int, bc),
		limit: make([]int, bc),
		q:     make([]float32, br*g.p.D),
		do:    make([]float32, br*g.p.Dv),
	}
	if g.bias != nil {
		w.bcol = make([]float32, br)
	}
	if dropping(g.p) {
		w.ng = (bc+7)/8 + 1 // a tile's keys span at most this many groups
		w.pt = make([]float32, bc*br)
		w.bits = make([]uint8, w.ng*br)
	}
	return w
}

// softTile returns a Br×Bc tile for the softcap's derivative, nil when the
// problem has no softcap.
func (g *bwd) softTile() []float32 {
	if !softcapped(g.p) {
		return nil
	}
	return make([]float32, g.cfg.Br*g.cfg.Bc)
}

// dead reports whether a row's LSE·log2e marks it as dead: it sees no key,
// or every score it sees is −Inf (lse2 = +Inf, see BackwardWith).
func dead(lse2 float32) bool { return math.IsInf(float64(lse2), 1) }

// liveRows returns the nr rows of qr and dor, with the rows of dead query
// rows replaced by zeros (in w's copies, only when the tile has one): they
// add nothing to dK and dV, even where their Q or dO holds ±Inf or NaN.
func (w *kvScratch) liveRows(qr, dor rows, nr, d, dv int, lse2 []float32) (q, do rows, anyDead bool) {
	if !slices.ContainsFunc(lse2[:nr], dead) {
		return qr, dor, false
	}
	for i := range nr {
		q, do := w.q[i*d:(i+1)*d], w.do[i*dv:(i+1)*dv]
		if dead(lse2[i]) {
			clear(q)
			clear(do)
			continue
		}
		copy(q, qr.row(i, d))
		copy(do, dor.row(i, dv))
	}
	return rows{w.q, 0, d}, rows{w.do, 0, dv}, true
}

// kvItem computes dK and dV for one (batch, kv head, key tile): it loops
// over the group's query heads in order and over the query tiles that see
// the key tile.
func (g *bwd) kvItem(w *kvScratch, it int) {
	p, br := g.p, g.cfg.Br
	b, kvh, j0, nk := g.kTiles.at(it)
	d, dvw := p.D, p.Dv
	diag := p.Diag(b, 0) // row i's diagonal is key diag+i

	dk, dv := w.dk[:nk*d], w.dv[:nk*dvw]
	clear(dk)
	clear(dv)
	first, limit := w.first[:nk], w.limit[:nk]
	for jj := range first {
		first[jj], limit[jj] = queryRows(p, b, j0+jj)
	}
	// Both are non-decreasing in the key: rows iBegin … iEnd−1 hold every
	// row that sees a key of the tile.
	iBegin, iEnd := first[0], limit[nk-1]
	kr := rows{g.k, p.KOffset(p.K, b, j0, kvh), p.K.Seq}
	vr := rows{g.v, p.KOffset(p.V, b, j0, kvh), p.V.Seq}

	grp := p.Group()
	g0 := j0 >> 3 // the tile's first group of keys
	for h := kvh * grp; h < (kvh+1)*grp; h++ {
		base := p.LSEIndex(b, h, 0)
		rule := newScoreRule(p, b, h)
		c := rule.c
		drop := newDropper(p, b, h)
		bias := biasOf(p, g.bias, b, h)
		for i0 := iBegin; i0 < iEnd; i0 += br {
			nr := min(br, iEnd-i0)
			if bias.hides(p, b, i0, nr, j0, nk) {
				continue // P = 0 and dS = 0 throughout
			}
			if g.ctx.Err() != nil {
				return // cancelled: parallel returns the error
			}
			qr := rows{g.q, p.QOffset(p.Q, b, i0, h), p.Q.Seq}
			dor := rows{g.do, p.QOffset(p.O, b, i0, h), p.O.Seq}
			lse2 := g.lse2[base+i0 : base+i0+nr]
			delta := g.delta[base+i0 : base+i0+nr]
			qr, dor, anyDead := w.liveRows(qr, dor, nr, d, dvw, lse2)

			st, dpt, soft := w.st, w.dpt, w.soft
			dotTile(st, br, kr, nk, qr, nr, d)
			for jj := range nk {
				row := st[jj*br : jj*br+nr]
				lo, hi := clip(first[jj]-i0, limit[jj]-i0, nr) // the rows that see key j0+jj
				clear(row[:lo])
				var bc []float32 // the key's bias over rows lo … hi−1
				if bias.buf != nil {
					bc = w.bcol[:hi-lo]
					bias.col(bc, i0+lo, j0+jj)
				}
				rule.scoresBias(row[lo:hi], tileRow(soft, jj, br, lo, hi), bc, diag+i0+lo-(j0+jj), 1)
				probRow(row[lo:hi], lse2[lo:hi], c)
				clear(row[hi:])
			}
			pt := st // dV's factor: Pᵀ, or Pᵀ∘keep
			if drop.on {
				pt = w.pt
				drop.groups(w.bits, br, p, b, i0, 0, nr, j0, nk, g0)
				for jj := range nk {
					lo, hi := clip(first[jj]-i0, limit[jj]-i0, nr)
					row := pt[jj*br : jj*br+nr]
					dropCol(row, st[jj*br:jj*br+nr], w.bits, br, j0+jj-g0*8, lo, hi, &drop.keep)
					clear(row[:lo])
					clear(row[hi:])
				}
			}
			accTile(dv, dvw, pt, br, nk, nr, dor, dvw)

			dotTile(dpt, br, vr, nk, dor, nr, dvw)
			for jj := range nk {
				lo, hi := clip(first[jj]-i0, limit[jj]-i0, nr)
				ds := dpt[jj*br : jj*br+nr]
				if drop.on { // Z∘dP: Scale·dP where kept, −0·dP where dropped
					dropCol(ds, ds, w.bits, br, j0+jj-g0*8, lo, hi, &drop.keepScale)
				}
				rule.dsRowVec(st[jj*br+lo:jj*br+hi], ds[lo:hi], delta[lo:hi], tileRow(soft, jj, br, lo, hi))
				clear(ds[:lo]) // dS 0 where masked
				clear(ds[hi:])
			}
			if anyDead { // dS 0 in dead rows, even against NaN in V
				for i := range nr {
					if dead(lse2[i]) {
						for jj := range nk {
							dpt[jj*br+i] = 0
						}
					}
				}
			}
			accTile(dk, d, dpt, br, nk, nr, qr, d)
		}
	}

	scale := 0.0 // dV's dropout scale (0: none)
	if dropping(p) {
		scale = p.Ext.Dropout.Scale()
	}
	for jj := range nk {
		out := rows{g.dk, p.KOffset(p.K, b, j0, kvh), p.K.Seq}.row(jj, d)
		a := dk[jj*d : jj*d+d]
		a = a[:len(out)]
		for x := range out {
			out[x] = a[x] * p.Scale
		}
		ov := rows{g.dv, p.KOffset(p.V, b, j0, kvh), p.V.Seq}.row(jj, dvw)
		av := dv[jj*dvw : jj*dvw+dvw]
		if scale == 0 {
			copy(ov, av)
			continue
		}
		av = av[:len(ov)]
		for x := range ov { // dV = Scale·(P∘keep)ᵀ·dO, one rounding
			ov[x] = float32(scale * float64(av[x]))
		}
	}
}

// dropCol sets dst[i] = src[i]·f[keep bit] for the rows i = lo … hi−1 of
// a transposed tile's key row, the key being bit k&7 of group k>>3 of the
// tile's bits (one byte per row, group stride ld).
func dropCol(dst, src []float32, bits []uint8, ld, k, lo, hi int, f *[2]float32) {
	e := uint(k & 7)
	bits = bits[(k>>3)*ld+lo : (k>>3)*ld+hi]
	dst, src = dst[lo:hi], src[lo:hi]
	for i := dropColSIMD(dst, src, bits, e, f); i < len(dst); i++ {
		dst[i] = src[i] * f[bits[i]>>e&1]
	}
}

// qScratch is one worker's memory for the dQ pass.
type qScratch struct {
	s, dp []float32 // Br×Bc: S then P, dP then dS
	soft  []float32 // Br×Bc: the softcap's derivative (nil without one)
	dq    []float32 // Br×D accumulator
	l2    []float32 // Br×Bc: each row's LSE·log2e repeated, for probRow
}

func (g *bwd) newQScratch() *qScratch {
	br, bc := g.cfg.Br, g.cfg.Bc
	return &qScratch{
		s:    make([]float32, br*bc),
		dp:   make([]float32, br*bc),
		soft: g.softTile(),
		dq:   make([]float32, br*g.p.D),
		l2:   make([]float32, br*bc),
	}
}

// qItem computes dQ for one (batch, query head, query tile), as numbered
// by g.qTiles, looping over the key tiles it sees in order, and adds its
// dS (without the softcap's factor: the bias lies after the softcap) into
// db's rows (nil buf: no dBias).
func (g *bwd) qItem(w *qScratch, it int, db dbRows) {
	p, bc := g.p, g.cfg.Bc
	b, h, i0, nr := g.qTiles.at(it)
	kvh := p.KVHead(h)
	d, dvw := p.D, p.Dv
	rule := newScoreRule(p, b, h)
	c := rule.c
	diag := p.Diag(b, i0) // row i0+i's diagonal is key diag+i
	drop := newDropper(p, b, h)
	bias := biasOf(p, g.bias, b, h)

	base := p.LSEIndex(b, h, i0)
	lse2 := g.lse2[base : base+nr]
	delta := g.delta[base : base+nr]
	qr := rows{g.q, p.QOffset(p.Q, b, i0, h), p.Q.Seq}
	dor := rows{g.do, p.QOffset(p.O, b, i0, h), p.O.Seq}
	dq := w.dq[:nr*d]
	clear(dq)

	for i := range nr {
		row := w.l2[i*bc : (i+1)*bc]
		for x := range row {
			row[x] = lse2[i]
		}
	}

	jBegin, jEnd := tileKeys(p, b, i0, nr)
	for j0 := jBegin; j0 < jEnd; j0 += bc {
		nc := min(bc, jEnd-j0)
		if bias.hides(p, b, i0, nr, j0, nc) {
			continue // dS = 0 (dBias stays 0)
		}
		if g.ctx.Err() != nil {
			return // cancelled: parallel returns the error
		}
		kr := rows{g.k, p.KOffset(p.K, b, j0, kvh), p.K.Seq}
		vr := rows{g.v, p.KOffset(p.V, b, j0, kvh), p.V.Seq}
		s, dp, soft := w.s, w.dp, w.soft
		dotTile(s, bc, qr, nr, kr, nc, d)
		dotTile(dp, bc, dor, nr, vr, nc, dvw)
		for i := range nr {
			lo, hi := rowKeys(p, b, i0+i, j0, nc)
			pr := s[i*bc : i*bc+nc]
			dr := dp[i*bc : i*bc+nc]
			if dead(lse2[i]) {
				lo, hi = 0, 0 // dS 0: the row adds nothing (and its dQ is 0)
			}
			rule.scoresBias(pr[lo:hi], tileRow(soft, i, bc, lo, hi), bias.at(i0+i, j0+lo, hi-lo), diag+i-(j0+lo), -1)
			probRow(pr[lo:hi], w.l2[i*bc+lo:i*bc+hi], c)
			if drop.on { // Z∘dP: Scale·dP where kept, −0·dP where dropped
				drop.apply(dr[lo:hi], i0+i, j0+lo, &drop.keepScale)
			}
			switch {
			case db.buf == nil:
				rule.dsRow(pr[lo:hi], dr[lo:hi], tileRow(soft, i, bc, lo, hi), delta[i])
			case lo < hi:
				// dBias takes dS before the softcap's factor, dQ after it.
				dsRow(pr[lo:hi], dr[lo:hi], delta[i])
				addRow(db.row(b, h, i0+i)[j0+lo:j0+hi], dr[lo:hi])
				if rule.softcap {
					mulRow(dr[lo:hi], tileRow(soft, i, bc, lo, hi))
				}
			}
			clear(dr[:lo])
			clear(dr[hi:])
		}
		accTile(dq, d, dp, bc, nr, nc, kr, d)
	}

	out := rows{g.dq, p.QOffset(p.Q, b, i0, h), p.Q.Seq}
	for i := range nr {
		o := out.row(i, d)
		if dead(lse2[i]) {
			clear(o)
			continue
		}
		a := dq[i*d : i*d+d]
		a = a[:len(o)]
		for x := range o {
			o[x] = a[x] * p.Scale
		}
	}
}
