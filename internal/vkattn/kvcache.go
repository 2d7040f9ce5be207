//go:build cgo

package vkattn

import (
	"context"
	"fmt"

	"github.com/flashvk/flashvk/internal/spec"
)

// KVCache runs a KV-cache call (p.KV set) on resident tensors.
func (b *Backend) KVCache(ctx context.Context, p *spec.Problem, q, k, v, newK, newV, o, lse *Tensor) error {
	return fmt.Errorf("%w: kv cache", ErrUnsupported)
}
