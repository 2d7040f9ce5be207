package attention_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/flashvk/flashvk/attention"
	"github.com/flashvk/flashvk/bfloat16"
)

func TestBFloat16DType(t *testing.T) {
	for _, s := range []string{"bfloat16", "bf16"} {
		if dt, err := attention.ParseDType(s); err != nil || dt != attention.BFloat16 {
			t.Errorf("ParseDType(%q) = %v, %v", s, dt, err)
		}
	}
	if attention.BFloat16.String() != "bfloat16" || attention.BFloat16.Size() != 2 {
		t.Errorf("BFloat16: %q, size %d", attention.BFloat16.String(), attention.BFloat16.Size())
	}
	s := attention.Shape{B: 1, S: 2, H: 1, D: 3}
	x, err := attention.NewTensor(attention.BFloat16, s, attention.BHSD)
	if err != nil || x.DType() != attention.BFloat16 || len(x.Data.([]bfloat16.BFloat16)) != 6 {
		t.Fatalf("NewTensor: %+v, %v", x, err)
	}
	data := bfloat16.Slice([]float32{1, 2, 3, 4, 5, 6.5})
	y := attention.FromBFloat16(data, s, attention.BSHD)
	if got := y.Float32s(); !slices.Equal(got, []float32{1, 2, 3, 4, 5, 6.5}) || y.DType() != attention.BFloat16 {
		t.Errorf("Float32s %v", got)
	}
}

// bf16 operands do not mix with other dtypes, and every built-in backend
// runs them.
func TestBFloat16Mixed(t *testing.T) {
	e, err := attention.Open(attention.Config{Backend: attention.CPU})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if !slices.Contains(e.Info().DTypes, attention.BFloat16) {
		t.Errorf("cpu dtypes %v", e.Info().DTypes)
	}
	s := attention.Shape{B: 1, S: 4, H: 1, D: 8}
	q, _ := attention.NewTensor(attention.BFloat16, s, attention.BSHD)
	k, _ := attention.NewTensor(attention.Float32, s, attention.BSHD)
	v, _ := attention.NewTensor(attention.BFloat16, s, attention.BSHD)
	if _, err := e.Forward(context.Background(), q, k, v, attention.Options{}); !errors.Is(err, attention.ErrDType) {
		t.Errorf("bf16 q with f32 k: %v", err)
	}
	k, _ = attention.NewTensor(attention.BFloat16, s, attention.BSHD)
	out, err := e.Forward(context.Background(), q, k, v, attention.Options{})
	if err != nil || out.O.DType() != attention.BFloat16 {
		t.Errorf("bf16 forward: %v", err)
	}
}
