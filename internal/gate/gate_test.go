package gate

import (
	"context"
	"testing"
	"time"
)

func TestGate(t *testing.T) {
	var g Gate
	caller := context.Background()
	cctx, leave, ok := g.Call(caller, false)
	if !ok || cctx.Done() == nil {
		t.Fatal("Call on an open gate: want a cancellable context")
	}
	if kept, leave2, _ := g.Call(caller, true); kept != caller {
		t.Error("Call with keepUncancellable: an uncancellable context must be kept")
	} else {
		leave2()
	}
	if !g.Acquire() {
		t.Fatal("Acquire on an open gate")
	}
	closed := make(chan bool)
	go func() { closed <- g.Close() }()
	<-cctx.Done() // Close cancels the call…
	if !StoppedByClose(caller, cctx) {
		t.Error("StoppedByClose: want true for a call Close cancelled")
	}
	leave()
	select {
	case <-closed:
		t.Fatal("Close returned while a use was in progress")
	case <-time.After(20 * time.Millisecond): // … and waits for every use
	}
	g.Release()
	if !<-closed {
		t.Error("first Close: want true")
	}
	if g.Close() {
		t.Error("second Close: want false")
	}
	if g.Acquire() {
		t.Error("Acquire after Close: want false")
	}
	if _, _, ok := g.Call(caller, false); ok {
		t.Error("Call after Close: want false")
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if StoppedByClose(ended, ended) {
		t.Error("StoppedByClose: the caller's own cancellation is not Close's")
	}
}
