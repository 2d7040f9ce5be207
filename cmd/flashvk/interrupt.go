package main

// Interrupts. main cancels the command's context on the first SIGINT or
// SIGTERM; the command stops within about a second — every blocking read
// and the float64 reference observe the context — and flashvk exits with
// 128 + the signal's number (130 for SIGINT, 143 for SIGTERM) after one
// line "flashvk: interrupted by SIGINT". A second signal exits at once
// with that signal's status, removing the temporary files of unwritten
// outputs first.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// signalCause is the cause of a context cancelled by a signal.
type signalCause struct{ sig os.Signal }

func (s signalCause) Error() string { return "interrupted by " + signalName(s.sig) }

// code is the exit status of a process ended by the signal: 128 + its
// number, as a shell reports it.
func (s signalCause) code() int { return signalCode(s.sig) }

func signalName(s os.Signal) string {
	switch s {
	case os.Interrupt:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return s.String()
}

func signalCode(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return 128 + int(n)
	}
	return 1
}

// handleSignals is main's two-stage signal handling: the first SIGINT or
// SIGTERM cancels the context it returns (cause: signalCause); a second
// removes the temporary output files and exits at once. stop ends the
// handling.
func handleSignals(parent context.Context) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(parent)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		var first os.Signal
		select {
		case first = <-sigs:
		case <-done:
			return
		}
		cancel(signalCause{first})
		select {
		case s := <-sigs:
			live.removeAll()
			fmt.Fprintf(os.Stderr, "flashvk: %s after %s: exiting at once\n", signalName(s), signalName(first))
			os.Exit(signalCode(s))
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel(nil)
	}
}

// interruptedError adds what a command had done when it was interrupted
// ("after 3 of 12 points") to the interrupt line.
type interruptedError struct {
	detail string
	err    error
}

func (e interruptedError) Error() string { return "interrupted " + e.detail }
func (e interruptedError) Unwrap() error { return e.err }

// interrupted prints the one line of a command stopped because ctx was
// cancelled and returns the exit status: 128 + the signal's number when a
// signal cancelled it, else 1.
func (a *app) interrupted(ctx context.Context, err error) int {
	msg, code := "interrupted", 1
	var sc signalCause
	if errors.As(context.Cause(ctx), &sc) {
		msg, code = sc.Error(), sc.code()
	} else if c := context.Cause(ctx); c != nil {
		msg += " (" + oneLine(c.Error()) + ")"
	}
	var ie interruptedError
	if errors.As(err, &ie) && ie.detail != "" {
		msg += " " + ie.detail
	}
	fmt.Fprintf(a.stderr, "flashvk: %s\n", msg)
	return code
}

// await returns f's result, or ctx's error as soon as ctx is done: for
// calls that do not observe a context (opening a FIFO blocks in open(2)
// until a writer comes). f then goes on in the background until it
// returns; flashvk exits soon after.
func await[T any](ctx context.Context, f func() (T, error)) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := f()
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}
