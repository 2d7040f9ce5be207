// Command flashvk runs, checks, benchmarks and explains flashvk's exact
// attention (FlashAttention forward and backward) on a Vulkan device or
// the pure-Go CPU backend.
//
//	flashvk devices                      # what can run: Vulkan devices and the CPU
//	flashvk run --seq 1024 --check       # one call, checked against a float64 reference
//	flashvk run --cache-seqlens 128,4000 --check # one KV-cache (decoding) call
//	flashvk bench --json h200.json       # the FlashAttention-2 paper's sweep
//	flashvk compare a.json b.json        # ratio table of two or more runs
//	flashvk report a.json b.json -o r.html
//	flashvk explain --seq 4096 --dim 128 # memory traffic of naive vs flash attention
//
// Install from a checkout with
//
//	go install ./cmd/flashvk
//
// (the module path is not published yet).
package main

import (
	"context"
	"os"
)

// main runs the command line. The first SIGINT or SIGTERM stops the
// command (exit status 130 or 143, nothing half written); a second exits
// at once.
func main() {
	ctx, stop := handleSignals(context.Background())
	code := execute(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
