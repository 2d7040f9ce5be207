package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// appRun runs flashvk in-process with an app prepared by setup and
// returns the exit status and stderr.
func appRun(t *testing.T, setup func(a *app), args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	a := newApp(&out, &errb)
	if setup != nil {
		setup(a)
	}
	code := a.execute(context.Background(), args)
	if strings.Contains(errb.String(), "internal error") {
		t.Fatalf("flashvk %s: %s", strings.Join(args, " "), errb.String())
	}
	return code, out.String(), errb.String()
}

// noInputs makes a test fail when the command gets as far as its inputs.
func noInputs(t *testing.T) func(a *app) {
	return func(a *app) {
		a.beforeInputs = func() { t.Error("the command started its work before refusing its output path") }
	}
}

// listDir lists the names in dir, sorted ("" entries for a missing dir).
func listDir(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

// fullDisk is an outputFS whose files accept limit bytes, then fail like
// a full disk (ENOSPC), for the files whose name contains match.
func fullDisk(match string, limit int) *outputFS {
	fs := defaultOutputFS
	fs.createTemp = func(dir, pattern string) (tempFile, error) {
		f, err := os.CreateTemp(dir, pattern)
		if err != nil || !strings.Contains(pattern, match) {
			return f, err
		}
		return &limitedFile{File: f, left: limit}, nil
	}
	return &fs
}

type limitedFile struct {
	*os.File
	left int
}

func (f *limitedFile) Write(p []byte) (int, error) {
	if len(p) > f.left {
		n, _ := f.File.Write(p[:f.left])
		f.left = 0
		return n, &fs.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
	}
	f.left -= len(p)
	return f.File.Write(p)
}

var tinyRun = []string{"run", "--backend", "cpu", "--seq", "16", "--heads", "2", "--dim", "8", "--iters", "0"}

// run --out writes every file or none; a target that is a folder is
// refused before any work.
func TestRunOutAllOrNothing(t *testing.T) {
	// Success: every file, no temporary left.
	dir := t.TempDir()
	mustRun(t, append(slices.Clone(tinyRun), "--backward", "--out", dir)...)
	if got := listDir(t, dir); !slices.Equal(got, []string{"dk.npy", "dq.npy", "dv.npy", "lse.npy", "o.npy"}) {
		t.Errorf("--out: %v", got)
	}

	// D/lse.npy is a folder: refused before any work, nothing written.
	dir = t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "lse.npy"), 0o755); err != nil {
		t.Fatal(err)
	}
	code, _, errs := appRun(t, noInputs(t), append(slices.Clone(tinyRun), "--out", dir)...)
	if code != 1 || errs != "flashvk: --out "+filepath.Join(dir, "lse.npy")+": is a directory, want a file\n" {
		t.Errorf("--out with lse.npy a folder: exit %d: %q", code, errs)
	}
	if got := listDir(t, dir); !slices.Equal(got, []string{"lse.npy"}) {
		t.Errorf("--out with lse.npy a folder left %v", got)
	}

	// --out under a file, and --out a file.
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, []byte("x"), 0o644)
	for _, out := range []string{file, filepath.Join(file, "sub")} {
		code, _, errs := appRun(t, noInputs(t), append(slices.Clone(tinyRun), "--out", out)...)
		if code != 1 || !strings.HasPrefix(errs, "flashvk: --out "+out+": cannot make ") || strings.Count(errs, "\n") != 1 {
			t.Errorf("--out %s: exit %d: %q", out, code, errs)
		}
	}

	// A new --out folder is removed again when the run fails.
	parent := t.TempDir()
	code, _, _ = appRun(t, func(a *app) { a.outFS = fullDisk("o.npy", 100) }, append(slices.Clone(tinyRun), "--out", filepath.Join(parent, "a", "b"))...)
	if code != 1 || len(listDir(t, parent)) != 0 {
		t.Errorf("a failed run left %v in a folder it made (exit %d)", listDir(t, parent), code)
	}
}

// A full disk while writing one file of run --out: nothing new is left,
// and a file that was there stays as it was.
func TestRunOutFullDisk(t *testing.T) {
	for _, failing := range []string{"o.npy", "lse.npy", "dv.npy"} {
		t.Run(failing, func(t *testing.T) {
			dir := t.TempDir()
			old := []byte("the previous o.npy")
			os.WriteFile(filepath.Join(dir, "o.npy"), old, 0o644)
			code, out, errs := appRun(t, func(a *app) { a.outFS = fullDisk(failing, 200) },
				append(slices.Clone(tinyRun), "--backward", "--check", "--out", dir)...)
			want := "flashvk: --out " + filepath.Join(dir, failing) + ": "
			if code != 1 || !strings.HasPrefix(errs, want) || !strings.Contains(errs, "no space left on device") || strings.Count(errs, "\n") != 1 {
				t.Errorf("exit %d: %q, want one line starting %q", code, errs, want)
			}
			if out != "" {
				t.Errorf("a failed run printed results:\n%s", out)
			}
			if got := listDir(t, dir); !slices.Equal(got, []string{"o.npy"}) {
				t.Errorf("left %v, want only the previous o.npy", got)
			}
			if b, _ := os.ReadFile(filepath.Join(dir, "o.npy")); !bytes.Equal(b, old) {
				t.Errorf("the previous o.npy was changed: %q", b)
			}
		})
	}
}

// A rename that fails half-way through the commit puts back the files
// already renamed: the previous o.npy is restored, new files removed.
func TestRunOutRenameFails(t *testing.T) {
	dir := t.TempDir()
	old := []byte("the previous o.npy")
	os.WriteFile(filepath.Join(dir, "o.npy"), old, 0o644)
	fsys := defaultOutputFS
	fsys.rename = func(from, to string) error {
		if filepath.Base(to) == "dk.npy" {
			return &os.LinkError{Op: "rename", Old: from, New: to, Err: syscall.EIO}
		}
		return os.Rename(from, to)
	}
	code, _, errs := appRun(t, func(a *app) { a.outFS = &fsys }, append(slices.Clone(tinyRun), "--backward", "--out", dir)...)
	if code != 1 || !strings.Contains(errs, "dk.npy") || !strings.Contains(errs, "nothing was written") {
		t.Errorf("exit %d: %q", code, errs)
	}
	if got := listDir(t, dir); !slices.Equal(got, []string{"o.npy"}) {
		t.Errorf("left %v, want only the previous o.npy", got)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "o.npy")); !bytes.Equal(b, old) {
		t.Errorf("the previous o.npy was not restored: %q", b)
	}
}

var tinyBenchArgs = []string{"bench", "--backend", "cpu", "--seq", "16", "--dim", "8", "--tokens", "16", "--hidden", "8",
	"--dtype", "f32", "--causal", "false", "--iters", "1", "--progress", "none"}

// bench --json refuses a path it cannot write before the sweep, and a
// write that fails leaves no file.
func TestBenchJSONChecked(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	os.WriteFile(file, []byte("x"), 0o644)
	for _, tc := range []struct{ path, msg string }{
		{"/proc/nope/x.json", "flashvk: --json /proc/nope/x.json: cannot make its folder: /proc/nope: "},
		{dir, "flashvk: --json " + dir + ": is a directory, want a file"},
		{filepath.Join(file, "x.json"), "flashvk: --json " + filepath.Join(file, "x.json") + ": cannot make its folder: "},
	} {
		start := time.Now()
		code, _, errs := appRun(t, noInputs(t), append(slices.Clone(tinyBenchArgs), "--json", tc.path)...)
		if code != 1 || !strings.HasPrefix(errs, tc.msg) || strings.Count(errs, "\n") != 1 {
			t.Errorf("--json %s: exit %d: %q, want %q…", tc.path, code, errs, tc.msg)
		}
		if el := time.Since(start); el > 2*time.Second {
			t.Errorf("--json %s: refused after %v", tc.path, el)
		}
	}
	if os.Geteuid() != 0 {
		ro := filepath.Join(dir, "ro")
		os.Mkdir(ro, 0o555)
		code, _, errs := appRun(t, noInputs(t), append(slices.Clone(tinyBenchArgs), "--json", filepath.Join(ro, "x.json"))...)
		if code != 1 || !strings.Contains(errs, "cannot write in "+ro) {
			t.Errorf("--json in a read-only folder: exit %d: %q", code, errs)
		}
	}

	// A full disk: the previous file stays, no temporary is left.
	path := filepath.Join(dir, "r.json")
	os.WriteFile(path, []byte("previous"), 0o644)
	code, _, errs := appRun(t, func(a *app) { a.outFS = fullDisk("r.json", 10) }, append(slices.Clone(tinyBenchArgs), "--json", path)...)
	if code != 1 || !strings.Contains(errs, "--json "+path+": ") || !strings.Contains(errs, "no space left") {
		t.Errorf("bench --json on a full disk: exit %d: %q", code, errs)
	}
	if b, _ := os.ReadFile(path); string(b) != "previous" || len(listDir(t, dir)) != 2 {
		t.Errorf("bench --json on a full disk: %q, %v", b, listDir(t, dir))
	}
	// And without it the file is replaced.
	mustRun(t, append(slices.Clone(tinyBenchArgs), "--json", path)...)
	if _, err := readResults(path); err != nil {
		t.Error(err)
	}
}

// report writes its HTML, Markdown and SVG files all or none.
func TestReportAllOrNothing(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a.json")
	tinyBench(t, a, "--causal=false")
	outDir := filepath.Join(dir, "out")
	os.Mkdir(outDir, 0o755)
	html, md := filepath.Join(outDir, "r.html"), filepath.Join(outDir, "r.md")
	os.WriteFile(html, []byte("old"), 0o644)
	code, _, errs := appRun(t, func(a *app) { a.outFS = fullDisk(".svg", 50) }, "report", a, "-o", html, "--markdown", md)
	if code != 1 || !strings.Contains(errs, ".svg") || !strings.Contains(errs, "--markdown") {
		t.Errorf("report on a full disk: exit %d: %q", code, errs)
	}
	if got := listDir(t, outDir); !slices.Equal(got, []string{"r.html"}) {
		t.Errorf("report on a full disk left %v", got)
	}
	if b, _ := os.ReadFile(html); string(b) != "old" {
		t.Errorf("the previous report was changed")
	}
	// The output path is checked before the inputs are read.
	code, _, errs = appRun(t, nil, "report", filepath.Join(dir, "missing.json"), "-o", dir)
	if code != 1 || !strings.Contains(errs, "--output "+dir+": is a directory") {
		t.Errorf("report -o DIR: exit %d: %q", code, errs)
	}
	if code, _, errs := appRun(t, nil, "report", a, "-o", html, "--markdown", html); code != 2 || !strings.Contains(errs, "same file") {
		t.Errorf("report -o X --markdown X: exit %d: %q", code, errs)
	}
}

// tune checks its cache and --json paths before opening a device.
func TestTuneOutputsChecked(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	os.WriteFile(file, []byte("x"), 0o644)
	base := []string{"tune", "--dtype", "f32", "--dim", "16", "--seq", "32", "--tokens", "32", "--hidden", "16", "--max-candidates", "1"}
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--cache", filepath.Join(file, "t.json")}, "flashvk: --cache " + filepath.Join(file, "t.json") + ": cannot make its folder"},
		{[]string{"--cache", dir}, "flashvk: --cache " + dir + ": is a directory"},
		{[]string{"--dry-run", "--json", dir}, "flashvk: --json " + dir + ": is a directory"},
		{[]string{"--dry-run", "--json", "/proc/nope/t.json"}, "flashvk: --json /proc/nope/t.json: cannot make its folder"},
	} {
		code, _, errs := appRun(t, noInputs(t), append(slices.Clone(base), tc.args...)...)
		if code != 1 || !strings.HasPrefix(errs, tc.msg) || strings.Count(errs, "\n") != 1 {
			t.Errorf("tune %v: exit %d: %q, want %q…", tc.args, code, errs, tc.msg)
		}
	}
	t.Setenv("FLASHVK_TUNE_CACHE", filepath.Join(file, "t.json"))
	if code, _, errs := appRun(t, noInputs(t), base...); code != 1 || !strings.Contains(errs, "the tune cache "+filepath.Join(file, "t.json")) {
		t.Errorf("tune with $FLASHVK_TUNE_CACHE under a file: exit %d: %q", code, errs)
	}
}

// writeNpy and writeFile leave the previous file when a write fails, and
// no temporary file.
func TestSingleFileWrites(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "x.npy")
	os.WriteFile(p, []byte("old"), 0o644)
	if err := writeNpy(p, []int{3}, []float32{1, 2}); err == nil || !strings.Contains(err.Error(), p) {
		t.Errorf("writeNpy of a wrong shape: %v", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "old" || len(listDir(t, dir)) != 1 {
		t.Errorf("a failed writeNpy left %q, %v", b, listDir(t, dir))
	}
	if err := writeNpy(p, []int{2}, []float32{1, 2}); err != nil {
		t.Fatal(err)
	}
	if a, err := readNpy(p); err != nil || !slices.Equal(a.Data.([]float32), []float32{1, 2}) {
		t.Errorf("writeNpy: %+v, %v", a, err)
	}
	// Large arrays are written in chunks; an interrupt stops them.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	o := (*app)(nil).newOutputs(ctx)
	defer o.abort()
	big := make([]float32, 1<<20)
	if err := o.write("", p, func(w io.Writer) error { return encodeNpy(w, []int{len(big)}, big) }); !errors.Is(err, context.Canceled) {
		t.Errorf("write after cancel: %v", err)
	}
	if len(listDir(t, dir)) != 1 {
		t.Errorf("a cancelled write left %v", listDir(t, dir))
	}
}

// --scale must be a positive float32; the check uses the scale the
// kernels get.
func TestScale(t *testing.T) {
	for _, tc := range []struct{ value, msg string }{
		{"1e-300", "rounds to 0 in float32"},
		{"1e-46", "rounds to 0 in float32"},
		{"0", "omit --scale for the default 1/√d"},
		{"0.0", "omit --scale for the default 1/√d"},
		{"-0.5", "must be positive"},
		{"1e39", "overflows float32"},
		{"NaN", "must be finite"},
		{"-Inf", "must be finite"},
		{"x", "is not a number"},
	} {
		for _, cmd := range []string{"run", "explain"} {
			code, _, errs := flashvk(t, cmd, "--backend", "cpu", "--seq", "16", "--dim", "8", "--scale", tc.value)
			if code != 2 || !strings.Contains(errs, `"--scale"`) || !strings.Contains(errs, tc.msg) || strings.Count(errs, "\n") != 1 {
				t.Errorf("%s --scale %s: exit %d: %q, want %q", cmd, tc.value, code, errs, tc.msg)
			}
		}
	}
	// Values that round to a positive float32 are taken, rounded: the
	// reference uses the very float32 the kernels get.
	// (1e-45 is a subnormal float32: the gradients, ~1e-46, are
	// subnormal too and lose their precision; the forward is checked.)
	for _, v := range []string{"1e-45", "0.1", "1e-30", "2.5"} {
		var rep runReport
		args := []string{"run", "--backend", "cpu", "--seq", "16", "--heads", "2", "--dim", "8", "--iters", "0", "--check", "--scale", v, "--json"}
		if v != "1e-45" {
			args = append(args, "--backward")
		}
		out := mustRun(t, args...)
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatal(err)
		}
		x, _ := strconv.ParseFloat(v, 32)
		if !rep.Pass || rep.Problem.Scale != x {
			t.Errorf("--scale %s: pass %v, scale %v, want %v", v, rep.Pass, rep.Problem.Scale, x)
		}
	}
	// The default: the library's float32(1/√d), given to both explicitly.
	p := problem{D: 48}
	if s := p.options().Scale; s != float32(1/math.Sqrt(48)) || p.params().Scale != float64(s) || p.effectiveScale() != float64(s) {
		t.Errorf("default scale: options %v, params %v", s, p.params().Scale)
	}
	p.Scale = float64(float32(0.3))
	if p.options().Scale != float32(0.3) || p.params().Scale != float64(float32(0.3)) {
		t.Errorf("--scale 0.3: options %v, params %v", p.options().Scale, p.params().Scale)
	}
}

// Outputs get the mode os.WriteFile gives, and a symbolic link at a
// target stays a link to the file that is replaced.
func TestOutputModeAndLinks(t *testing.T) {
	dir := t.TempDir()
	ref := filepath.Join(dir, "ref")
	os.WriteFile(ref, nil, 0o644)
	refSt, _ := os.Stat(ref)
	real := filepath.Join(dir, "elsewhere", "real.npy")
	os.Mkdir(filepath.Dir(real), 0o755)
	os.WriteFile(real, []byte("old"), 0o644)
	out := filepath.Join(dir, "out")
	os.Mkdir(out, 0o755)
	if err := os.Symlink(real, filepath.Join(out, "o.npy")); err != nil {
		t.Skip(err)
	}
	mustRun(t, append(slices.Clone(tinyRun), "--out", out)...)
	if st, err := os.Lstat(filepath.Join(out, "o.npy")); err != nil || st.Mode()&fs.ModeSymlink == 0 {
		t.Errorf("o.npy is no longer a link: %v", err)
	}
	if a, err := readNpy(real); err != nil || len(a.Shape) != 4 {
		t.Errorf("the linked file was not replaced: %v", err)
	}
	st, err := os.Stat(filepath.Join(out, "lse.npy"))
	if err != nil || st.Mode().Perm() != refSt.Mode().Perm() {
		t.Errorf("lse.npy mode %v, want %v (%v)", st.Mode().Perm(), refSt.Mode().Perm(), err)
	}
	if got := listDir(t, filepath.Dir(real)); !slices.Equal(got, []string{"real.npy"}) {
		t.Errorf("left %v beside the linked file", got)
	}
}

// TestOutputIntoSpecialFile: an output path that exists and is not a
// regular file — a FIFO here; /dev/null, /dev/stdout on a pipe alike — is
// written into, never replaced by a regular file (as root a rename would
// replace even /dev/null), and no temporary file is left beside it.
func TestOutputIntoSpecialFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "out.json")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skip(err)
	}
	got := make(chan []byte, 1)
	go func() {
		f, err := os.Open(fifo) // blocks until the writer opens it
		if err != nil {
			got <- nil
			return
		}
		b, _ := io.ReadAll(f)
		f.Close()
		got <- b
	}()
	o := (*app)(nil).newOutputs(context.Background())
	defer o.abort()
	if err := o.prepare("--json", fifo); err != nil {
		t.Fatal(err)
	}
	if err := o.write("--json", fifo, func(w io.Writer) error { _, err := io.WriteString(w, "{}\n"); return err }); err != nil {
		t.Fatal(err)
	}
	if err := o.commit(); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Lstat(fifo); err != nil || st.Mode()&fs.ModeNamedPipe == 0 {
		t.Fatalf("the FIFO was replaced: %v, %v", st.Mode(), err) // (its reader waits on forever)
	}
	select {
	case b := <-got:
		if string(b) != "{}\n" {
			t.Errorf("the FIFO's reader got %q, want the output", b)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("nothing was written into the FIFO")
	}
	if got := listDir(t, dir); !slices.Equal(got, []string{"out.json"}) {
		t.Errorf("left %v beside it", got)
	}
}
