package attention_test

import (
	"testing"

	"github.com/flashvk/flashvk/attention"
	"github.com/flashvk/flashvk/attention/attentiontest"
)

func TestConformanceCPU(t *testing.T) {
	e, err := attention.Open(attention.Config{Backend: attention.CPU})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	attentiontest.Run(t, e)
}
