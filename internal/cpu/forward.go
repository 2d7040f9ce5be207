package cpu

import (
	"context"
	"math"

	"github.com/flashvk/flashvk/internal/spec"
)

// ForwardWith is Forward with an explicit Config, for a problem without a
// bias (spec.Ext.Bias; see ForwardBias).
func ForwardWith(ctx context.Context, cfg Config, p *spec.Problem, q, k, v, o, lse []float32) error {
	return ForwardBias(ctx, cfg, p, q, k, v, o, lse, Bias{})
}

// ForwardBias is ForwardWith for any problem: x holds the bias of a
// problem with spec.Ext.Bias (x.Bias, indexed by spec.Bias.At; x.DBias is
// not read), and is the zero Bias otherwise.
func ForwardBias(ctx context.Context, cfg Config, p *spec.Problem, q, k, v, o, lse []float32, x Bias) error {
	if err := checkProblem(p); err != nil {
		return err
	}
	if err := checkOperands(p, lse, operand{"q", q, asQ}, operand{"k", k, asK}, operand{"v", v, asV}, operand{"o", o, asO}); err != nil {
		return err
	}
	if err := checkBias(p, x, false); err != nil {
		return err
	}
	if p.B == 0 || p.Hq == 0 || p.Nq == 0 {
		return ctx.Err()
	}
	cfg = cfg.resolve(p)
	f := &fwd{ctx: ctx, p: p, cfg: cfg, q: q, k: k, v: v, o: o, lse: lse, bias: x.Bias, tiles: queryTiling(p, cfg.Br)}
	return parallel(ctx, cfg.Workers, f.tiles.items(), f.newScratch, f.item)
}

type fwd struct {
	ctx        context.Context // checked between key tiles
	p          *spec.Problem
	cfg        Config
	q, k, v, o []float32
	lse        []float32
	bias       []float32 // spec.Ext.Bias's elements (nil: none)
	tiles      *tiling   // the work items: query tiles × heads
}

// fwdScratch is one worker's tile memory.
type fwdScratch struct {
	s    []float32 // Br×Bc scores, then probabilities
	acc  []float32 // Br×Dv unnormalised output
	m, l []float32 // Br running max (base 2) and running sum
}

func (f *fwd) newScratch() *fwdScratch {
	br, bc := f.cfg.Br, f.cfg.Bc
	return &fwdScratch{
		s:   make([]float32, br*bc),
		acc: make([]float32, br*f.p.Dv),
		m:   make([]float32, br),
		l:   make([]float32, br),
	}
}

// item runs one (batch, head, query tile), as numbered by f.tiles.
func (f *fwd) item(w *fwdScratch, it int) {
	p, bc := f.p, f.cfg.Bc
	b, h, i0, nr := f.tiles.at(it)
	kvh := p.KVHead(h)
	d, dv := p.D, p.Dv
	rule := newScoreRule(p, b, h)
	c := rule.c
	diag := p.Diag(b, i0) // row i0+i's diagonal is key diag+i
	drop := newDropper(p, b, h)
	bias := biasOf(p, f.bias, b, h)

	qr := rows{f.q, p.QOffset(p.Q, b, i0, h), p.Q.Seq}
	m, l, acc := w.m[:nr], w.l[:nr], w.acc[:nr*dv]
	for i := range m {
		m[i] = spec.NegInf
		l[i] = 0
	}
	clear(acc)

	jBegin, jEnd := tileKeys(p, b, i0, nr)
	for j0 := jBegin; j0 < jEnd; j0 += bc {
		nc := min(bc, jEnd-j0)
		if bias.hides(p, b, i0, nr, j0, nc) {
			continue // every score −Inf: nothing to add
		}
		if f.ctx.Err() != nil {
			return // cancelled: parallel returns the error
		}
		kr := rows{f.k, p.KOffset(p.K, b, j0, kvh), p.K.Seq}
		vr := rows{f.v, p.KOffset(p.V, b, j0, kvh), p.V.Seq}
		s := w.s
		dotTile(s, bc, qr, nr, kr, nc, d)
		for i := range nr {
			row := s[i*bc : i*bc+nc]
			lo, hi := rowKeys(p, b, i0+i, j0, nc)
			if lo == hi {
				clear(row)
				continue
			}
			r := row[lo:hi]
			var mt float32 // the tile's row maximum of c·s
			if rule.rewrite {
				// c = log2e > 0: c·max s (multiplying is monotonic).
				mt = c * rule.scoresBias(r, nil, bias.at(i0+i, j0+lo, hi-lo), diag+i-(j0+lo), -1)
			} else {
				mt = scaledMax(r, c)
			}
			mOld := m[i]
			mNew := max(mOld, mt)
			// While every score is −Inf, exponentiate against 0: 2^(−Inf − 0)
			// = 0, never 2^(−Inf + Inf) = NaN (a NaN score still gives NaN).
			mUse := mNew
			if mNew == spec.NegInf {
				mUse = 0
			}
			sum := expRow(r, c, mUse)
			if drop.on { // l sums the undropped P; P·V takes the kept ones
				drop.apply(r, i0+i, j0+lo, &drop.keep)
			}
			clear(row[:lo])
			clear(row[hi:])
			if mNew != mOld {
				alpha := exp2(mOld - mNew)
				scaleRow(acc[i*dv:i*dv+dv], alpha)
				l[i] *= alpha
			}
			l[i] += sum
			m[i] = mNew
		}
		accTile(acc, dv, s, bc, nr, nc, vr, dv)
	}

	for i := range nr {
		out := rows{f.o, p.QOffset(p.O, b, i0, h), p.O.Seq}.row(i, dv)
		li := &f.lse[p.LSEIndex(b, h, i0+i)]
		if l[i] == 0 {
			clear(out)
			*li = spec.NegInf
			continue
		}
		inv := 1 / l[i]
		if drop.on { // O = Scale·Σ P·keep·V / l, one rounding for Scale/l
			inv = float32(drop.scale / float64(l[i]))
		}
		a := acc[i*dv : i*dv+dv]
		a = a[:len(out)]
		for x := range out {
			out[x] = a[x] * inv
		}
		*li = float32((float64(m[i]) + math.Log2(float64(l[i]))) * math.Ln2)
	}
}

// scaledMax returns the largest c·r[x] of a non-empty r: c·max r, or
// c·min r when c < 0 (multiplying by c is monotonic, rounding included).
func scaledMax(r []float32, c float32) float32 {
	mx, mn := rowMaxMin(r)
	if c < 0 {
		return c * mn
	}
	return c * mx
}
