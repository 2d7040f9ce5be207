//go:build unix

package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain runs the test binary as flashvk itself when a signal test
// starts it as a child (FLASHVK_TEST_CHILD).
func TestMain(m *testing.M) {
	if mode := os.Getenv("FLASHVK_TEST_CHILD"); mode != "" {
		childMain(mode, strings.Split(os.Getenv("FLASHVK_TEST_ARGS"), "\x1f"))
	}
	os.Exit(m.Run())
}

// childMain is main with a "ready" line once the signals are handled.
// Mode "stuck" makes the command hang where its inputs start, ignoring
// its context (as a call that does not observe one would).
func childMain(mode string, args []string) {
	ctx, stop := handleSignals(context.Background())
	a := newApp(os.Stdout, os.Stderr)
	if mode == "stuck" {
		a.beforeInputs = func() {
			fmt.Fprintln(os.Stderr, "stuck")
			time.Sleep(time.Hour)
		}
	}
	fmt.Fprintln(os.Stderr, "ready")
	code := a.execute(ctx, args)
	stop()
	os.Exit(code)
}

// child is flashvk running in a child process.
type child struct {
	cmd   *exec.Cmd
	lines chan string // stderr
	done  chan struct{}
	err   error
	all   bytes.Buffer
}

func startChild(t *testing.T, mode string, args ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "FLASHVK_TEST_CHILD="+mode, "FLASHVK_TEST_ARGS="+strings.Join(args, "\x1f"))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, lines: make(chan string, 100), done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			c.all.WriteString(sc.Text() + "\n")
			c.lines <- sc.Text()
		}
		close(c.lines)
		c.err = cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-c.done
	})
	c.await(t, "ready")
	return c
}

// await waits for the line want on the child's stderr.
func (c *child) await(t *testing.T, want string) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				t.Fatalf("the child ended before %q:\n%s", want, c.all.String())
			}
			if l == want {
				return
			}
		case <-timeout:
			t.Fatalf("no %q from the child", want)
		}
	}
}

// exit waits for the child's end and returns its status, stderr and how
// long after since it ended.
func (c *child) exit(t *testing.T, since time.Time) (int, string, time.Duration) {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the child did not exit")
	}
	el := time.Since(since)
	var ee *exec.ExitError
	if errors.As(c.err, &ee) {
		if ee.ExitCode() < 0 {
			t.Fatalf("the child was killed by a signal: %v\n%s", c.err, c.all.String())
		}
		return ee.ExitCode(), c.all.String(), el
	}
	if c.err != nil {
		t.Fatal(c.err)
	}
	return 0, c.all.String(), el
}

func (c *child) signal(t *testing.T, s os.Signal) time.Time {
	t.Helper()
	if err := c.cmd.Process.Signal(s); err != nil {
		t.Fatal(err)
	}
	return time.Now()
}

// fifo makes a FIFO that nobody writes: opening it to read blocks. The
// cleanup releases a reader still waiting (an in-process test's).
func fifo(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "q.npy")
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	t.Cleanup(func() {
		if f, err := os.OpenFile(p, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
	return p
}

// One SIGINT or SIGTERM stops a command within about a second, with one
// line and the status a shell reports for the signal.
func TestSignalExitStatus(t *testing.T) {
	q := fifo(t)
	out := filepath.Join(t.TempDir(), "new")
	for _, tc := range []struct {
		name string
		sig  os.Signal
		args []string
		want int
		wait time.Duration
	}{
		// Blocked opening a FIFO as --q.
		{"fifo SIGINT", os.Interrupt, []string{"run", "--backend", "cpu", "--q", q, "--k", td("k.npy"), "--v", td("v.npy"), "--out", out}, 130, 300 * time.Millisecond},
		{"fifo SIGTERM", syscall.SIGTERM, []string{"run", "--backend", "cpu", "--q", q, "--k", td("k.npy"), "--v", td("v.npy")}, 143, 300 * time.Millisecond},
		// In the float64 reference of a long --check (about 10 s).
		{"check SIGINT", os.Interrupt, []string{"run", "--backend", "cpu", "--seq", "2048", "--heads", "16", "--dim", "64", "--check", "--backward",
			"--iters", "0", "--out", out}, 130, 800 * time.Millisecond},
		// A bench sweep.
		{"bench SIGTERM", syscall.SIGTERM, []string{"bench", "--backend", "cpu", "--seq", "1024", "--dim", "64", "--iters", "50", "--progress", "none",
			"--json", filepath.Join(out, "b.json")}, 143, 800 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := startChild(t, "main", tc.args...)
			time.Sleep(tc.wait)
			sent := c.signal(t, tc.sig)
			code, errs, el := c.exit(t, sent)
			lines := strings.Split(strings.TrimSpace(errs), "\n")
			last := lines[len(lines)-1]
			if code != tc.want || !strings.HasPrefix(last, "flashvk: interrupted by "+signalName(tc.sig)) {
				t.Errorf("exit %d, last line %q, want %d and an interrupt line:\n%s", code, last, tc.want, errs)
			}
			if el > 1500*time.Millisecond {
				t.Errorf("exited %v after the signal", el)
			}
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Errorf("an interrupted command left its outputs: %v", err)
			}
		})
	}
}

// A second signal exits at once, while the command is still stopping,
// and removes the temporary outputs.
func TestSecondSignal(t *testing.T) {
	out := filepath.Join(t.TempDir(), "new", "out")
	c := startChild(t, "stuck", "run", "--backend", "cpu", "--seq", "16", "--heads", "1", "--dim", "8", "--out", out)
	c.await(t, "stuck")
	if _, err := os.Stat(out); err != nil {
		t.Fatalf("--out was not made before the work: %v", err)
	}
	c.signal(t, os.Interrupt)
	select {
	case <-c.done:
		t.Fatalf("the stuck child exited on the first signal:\n%s", c.all.String())
	case <-time.After(300 * time.Millisecond):
	}
	sent := c.signal(t, syscall.SIGTERM)
	code, errs, el := c.exit(t, sent)
	if code != 143 || !strings.Contains(errs, "flashvk: SIGTERM after SIGINT: exiting at once\n") {
		t.Errorf("exit %d:\n%s", code, errs)
	}
	if el > time.Second {
		t.Errorf("exited %v after the second signal", el)
	}
	if _, err := os.Stat(filepath.Dir(out)); !os.IsNotExist(err) {
		t.Errorf("the folders made for --out are still there: %v", err)
	}
}

// cancelAfter returns a context cancelled by a (pretend) SIGINT d after
// start is called.
func cancelAfter(d time.Duration) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	return ctx, func() { time.AfterFunc(d, func() { cancel(signalCause{os.Interrupt}) }) }
}

// Reading a FIFO as an input observes the context: cancelled after
// 200 ms, the command returns at once with the interrupt.
func TestFIFOInputCancelled(t *testing.T) {
	q := fifo(t)
	for _, args := range [][]string{
		{"run", "--backend", "cpu", "--q", q, "--k", td("k.npy"), "--v", td("v.npy")},
		{"run", "--backend", "cpu", "--q", td("q.npy"), "--k", td("k.npy"), "--v", td("v.npy"), "--backward", "--do", q},
		{"compare", q, q},
		{"report", q, "-o", filepath.Join(t.TempDir(), "r.html")},
		{"tune", "--show", "--cache", q},
	} {
		ctx, start := cancelAfter(200 * time.Millisecond)
		var out, errb bytes.Buffer
		begin := time.Now()
		start()
		code := newApp(&out, &errb).execute(ctx, args)
		el := time.Since(begin)
		if code != 130 || errb.String() != "flashvk: interrupted by SIGINT\n" {
			t.Errorf("%s: exit %d: %q", strings.Join(args, " "), code, errb.String())
		}
		if el > time.Second {
			t.Errorf("%s: returned after %v", strings.Join(args, " "), el)
		}
	}
	// A context cancelled without a signal: status 1.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	var errb bytes.Buffer
	if code := newApp(io.Discard, &errb).execute(ctx, []string{"compare", q, q}); code != 1 || !strings.HasPrefix(errb.String(), "flashvk: interrupted (") {
		t.Errorf("compare of a FIFO past a deadline: exit %d: %q", code, errb.String())
	}
}

// The float64 reference of --check observes the context: a long check
// stops promptly, and writes nothing.
func TestCheckCancelled(t *testing.T) {
	out := filepath.Join(t.TempDir(), "new")
	ctx, start := cancelAfter(300 * time.Millisecond)
	var stdout, errb bytes.Buffer
	a := newApp(&stdout, &errb)
	var began time.Time
	a.beforeInputs = func() { began = time.Now(); start() }
	code := a.execute(ctx, []string{"run", "--backend", "cpu", "--seq", "2048", "--heads", "16", "--dim", "64", "--check", "--backward",
		"--iters", "0", "--out", out})
	if el := time.Since(began); el > 1300*time.Millisecond {
		t.Errorf("returned %v after the inputs began (cancelled after 300 ms)", el)
	}
	if code != 130 || errb.String() != "flashvk: interrupted by SIGINT\n" || stdout.Len() != 0 {
		t.Errorf("exit %d: %q\n%s", code, errb.String(), stdout.String())
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("an interrupted run left --out: %v", err)
	}

	// bench: interrupted between points, it writes no results file.
	path := filepath.Join(t.TempDir(), "b.json")
	ctx, start = cancelAfter(300 * time.Millisecond)
	stdout.Reset()
	errb.Reset()
	a = newApp(&stdout, &errb)
	a.beforeInputs = start
	code = a.execute(ctx, []string{"bench", "--backend", "cpu", "--seq", "256,512,1024", "--dim", "64", "--check", "--iters", "3",
		"--progress", "none", "--json", path})
	if code != 130 || !strings.HasPrefix(errb.String(), "flashvk: interrupted by SIGINT after ") || !strings.Contains(errb.String(), "no results written") {
		t.Errorf("bench: exit %d: %q", code, errb.String())
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) || stdout.Len() != 0 {
		t.Errorf("an interrupted bench wrote %v:\n%s", err, stdout.String())
	}
}
