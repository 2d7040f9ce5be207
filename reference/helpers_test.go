package reference

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

func randSlice(r *rand.Rand, n int) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = r.NormFloat64()
	}
	return s
}

// randInputs returns random q, k, v, do for p.
func randInputs(t *testing.T, p Params, seed uint64) (q, k, v, do []float64) {
	t.Helper()
	require.NoError(t, p.Validate())
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	lq, lk, lv, lo, _ := p.Lengths()
	return randSlice(r, lq), randSlice(r, lk), randSlice(r, lv), randSlice(r, lo)
}

// at returns the offset of (b, n, h, 0) in a contiguous [B, N, H, X] tensor;
// written independently of the package's gather/scatter.
func at(b, n, h int, N, H, X int) int { return b*N*H*X + n*H*X + h*X }
