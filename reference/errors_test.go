package reference

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestValidate(t *testing.T) {
	good := Params{B: 1, Hq: 4, Hkv: 2, Nq: 3, Nk: 5, D: 4, Dv: 2}
	require.NoError(t, good.Validate())
	neg := good
	neg.Scale = -0.5
	require.NoError(t, neg.Validate(), "negative scale is valid math")

	mod := func(f func(*Params)) Params { p := good; f(&p); return p }
	bad := map[string]Params{
		"zero":       {},
		"B=0":        mod(func(p *Params) { p.B = 0 }),
		"Hq<0":       mod(func(p *Params) { p.Hq = -4 }),
		"Hkv=0":      mod(func(p *Params) { p.Hkv = 0 }),
		"Nq=0":       mod(func(p *Params) { p.Nq = 0 }),
		"Nk=0":       mod(func(p *Params) { p.Nk = 0 }),
		"D=0":        mod(func(p *Params) { p.D = 0 }),
		"Dv=0":       mod(func(p *Params) { p.Dv = 0 }),
		"Hq%Hkv":     mod(func(p *Params) { p.Hkv = 3 }),
		"Hkv>Hq":     mod(func(p *Params) { p.Hkv = 8 }),
		"NaN scale":  mod(func(p *Params) { p.Scale = math.NaN() }),
		"Inf scale":  mod(func(p *Params) { p.Scale = math.Inf(1) }),
		"-Inf scale": mod(func(p *Params) { p.Scale = math.Inf(-1) }),
		"overflow":   mod(func(p *Params) { p.B, p.Nq = math.MaxInt/2, 4 }),
		"S overflow": mod(func(p *Params) { p.Nq, p.Nk = math.MaxInt/2, 3 }),
	}
	for name, p := range bad {
		t.Run(name, func(t *testing.T) {
			assert.NotPanics(t, func() {
				assert.ErrorIs(t, p.Validate(), ErrShape)
				_, _, err := Forward(p, nil, nil, nil)
				assert.ErrorIs(t, err, ErrShape)
				_, _, _, err = Backward(p, nil, nil, nil, nil)
				assert.ErrorIs(t, err, ErrShape)
				assert.Nil(t, Probabilities(p, nil, nil, 0, 0))
			})
		})
	}
}

func TestBadLengths(t *testing.T) {
	p := Params{B: 1, Hq: 4, Hkv: 2, Nq: 3, Nk: 5, D: 4, Dv: 2}
	q, k, v, do := randInputs(t, p, 12)
	short := func(s []float64) []float64 { return s[:len(s)-1] }
	long := func(s []float64) []float64 { return append(append([]float64(nil), s...), 0) }
	for name, in := range map[string][4][]float64{
		"q short":  {short(q), k, v, do},
		"k short":  {q, short(k), v, do},
		"v short":  {q, k, short(v), do},
		"do short": {q, k, v, short(do)},
		"q long":   {long(q), k, v, do},
		"v long":   {q, k, long(v), do},
		"do nil":   {q, k, v, nil},
		"k nil":    {q, nil, v, do},
		// K and V swapped: same count only if D == Dv, which it is not here.
		"k/v swapped": {q, v, k, do},
	} {
		t.Run(name, func(t *testing.T) {
			assert.NotPanics(t, func() {
				_, _, _, err := Backward(p, in[0], in[1], in[2], in[3])
				assert.ErrorIs(t, err, ErrShape)
				if name != "do short" && name != "do nil" {
					_, _, err := Forward(p, in[0], in[1], in[2])
					assert.ErrorIs(t, err, ErrShape)
				}
			})
		})
	}
	_, _, err := Forward(p, q, k, v)
	assert.NoError(t, err)
	_, _, _, err = Backward(p, q, k, v, do)
	assert.NoError(t, err)
}

// TestContextCancelled: the Context forms stop on a cancelled context
// (checked between (batch, head) pairs) and say so.
func TestContextCancelled(t *testing.T) {
	p := Params{B: 2, Hq: 2, Hkv: 1, Nq: 3, Nk: 4, D: 2, Dv: 2}
	q, k, v, do := randInputs(t, p, 1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := ForwardContext(ctx, p, q, k, v); !errors.Is(err, context.Canceled) {
		t.Errorf("ForwardContext: %v, want context.Canceled", err)
	}
	if _, _, _, err := BackwardContext(ctx, p, q, k, v, do); !errors.Is(err, context.Canceled) {
		t.Errorf("BackwardContext: %v, want context.Canceled", err)
	}
}
