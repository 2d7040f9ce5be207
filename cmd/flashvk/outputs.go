package main

// The files a command writes (run --out, bench --json, tune --json and the
// tune cache, report -o and --markdown) are written all or none: every path
// is checked before any work, each file is written to a temporary file in
// its target's folder, and only when every one is complete are they renamed
// over their targets. A command that fails — an output it cannot write, a
// full disk, an interrupt — leaves no new file (but tune's lock file beside
// the cache, attention.LockTuneCache's, which stays for the next tune) and
// every existing target as it was. A target that exists and is not a regular
// file (a device such as /dev/null, a FIFO, /dev/stdout on a pipe) is never
// replaced: its output is staged in the system's temporary folder and
// written into it after the renames.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// tempFile is a temporary output file (an *os.File; tests substitute one
// that fails like a full disk).
type tempFile interface {
	io.Writer
	Name() string
	Sync() error
	Close() error
}

// outputFS is how outputs create temporary files and rename them (tests
// replace it to fail on purpose).
type outputFS struct {
	createTemp func(dir, pattern string) (tempFile, error)
	rename     func(from, to string) error
}

// osCreateTemp creates a new file in dir named by pattern, its "*" a
// random number (as os.CreateTemp), with mode 0644 less the umask: the
// mode os.WriteFile gives, which the output keeps once renamed.
func osCreateTemp(dir, pattern string) (tempFile, error) {
	prefix, suffix, _ := strings.Cut(pattern, "*")
	for range 1000 {
		name := filepath.Join(dir, prefix+strconv.FormatUint(uint64(rand.Uint32()), 10)+suffix)
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return f, nil
	}
	return nil, &fs.PathError{Op: "createtemp", Path: filepath.Join(dir, pattern), Err: fs.ErrExist}
}

var defaultOutputFS = outputFS{createTemp: osCreateTemp, rename: os.Rename}

// outputs are the files of one command, staged until commit.
type outputs struct {
	ctx   context.Context
	fs    outputFS
	files []stagedFile
	// dirs are the folders made for the outputs, parents first: removed
	// again (when empty) if the command fails.
	dirs []string
	done bool
}

// stagedFile is a complete output in its temporary file. path names the
// output in messages; target is where it goes (path, or the file a
// symbolic link at path names); stream: the target is not a regular file
// and is written into, not replaced.
type stagedFile struct {
	flag, path, target, tmp string
	stream                  bool
}

// special reports whether path exists and, following links, is neither a
// regular file nor a folder: a device, a FIFO, a socket or a pipe.
func special(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.Mode().IsRegular() && !st.IsDir()
}

// newOutputs starts the outputs of a command; writes stop with ctx's
// error once ctx is done. Every command that writes files defers abort.
func (a *app) newOutputs(ctx context.Context) *outputs {
	o := &outputs{ctx: ctx, fs: defaultOutputFS}
	if a != nil && a.outFS != nil {
		o.fs = *a.outFS
	}
	return o
}

// outErr is an output error: one line naming the flag and the file.
func outErr(flag, path, format string, args ...any) error {
	msg := oneLine(fmt.Sprintf(format, args...))
	if flag == "" {
		return fmt.Errorf("%s: %s", path, msg)
	}
	return fmt.Errorf("%s %s: %s", flag, path, msg)
}

// prepare checks, before any work, that the file path (named by flag) can
// be written: it is not a folder, its folder exists or can be made (it is
// made now, and removed again if the command fails), and a file can be
// created there.
func (o *outputs) prepare(flag, path string) error {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return outErr(flag, path, "is a directory, want a file")
	}
	if special(path) {
		return o.prepareDir(flag, os.TempDir(), path) // (written into at commit)
	}
	return o.prepareDir(flag, filepath.Dir(path), path)
}

// prepareDir makes the folder dir for the file or folder path names, and
// checks that a file can be created in it.
func (o *outputs) prepareDir(flag, dir, path string) error {
	if err := o.mkdirAll(dir); err != nil {
		what := "its folder"
		if filepath.Clean(dir) == filepath.Clean(path) {
			what = "the folder"
		}
		return outErr(flag, path, "cannot make %s: %s", what, plainPathError(err))
	}
	f, err := o.fs.createTemp(dir, ".flashvk-probe-*")
	if err != nil {
		return outErr(flag, path, "cannot write in %s: %s", dir, plainPathError(err))
	}
	name := f.Name()
	f.Close()
	os.Remove(name)
	return nil
}

// mkdirAll makes dir and its missing parents, recording those it made.
func (o *outputs) mkdirAll(dir string) error {
	var missing []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err == nil {
			if !st.IsDir() {
				return fmt.Errorf("%s is not a directory", d)
			}
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		missing = append(missing, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	for _, d := range slices.Backward(missing) {
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		o.dirs = append(o.dirs, d)
		live.add(d, true)
	}
	return nil
}

// plainPathError drops the operation os adds to a path error ("mkdir
// /proc/nope: no such file or directory" is "/proc/nope: no such file or
// directory").
func plainPathError(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Path + ": " + pe.Err.Error()
	}
	return err.Error()
}

// write stages the file path (named by flag): fn writes its content, which
// goes to a temporary file beside path. Nothing is at path until commit.
func (o *outputs) write(flag, path string, fn func(w io.Writer) error) error {
	return o.stage(flag, path, func(f tempFile) error {
		bw := bufio.NewWriterSize(ctxWriter{o.ctx, f}, 1<<20)
		if err := fn(bw); err != nil {
			return err
		}
		if err := bw.Flush(); err != nil {
			return err
		}
		return f.Sync()
	})
}

// writeBytes stages the file path with content b.
func (o *outputs) writeBytes(flag, path string, b []byte) error {
	return o.write(flag, path, func(w io.Writer) error {
		for len(b) > 0 {
			n := min(len(b), 1<<20)
			if _, err := w.Write(b[:n]); err != nil {
				return err
			}
			b = b[n:]
		}
		return nil
	})
}

// writePath stages the file path, which save writes to the temporary
// path it is given (for writers that take a path, such as
// attention.TuneCache.Save).
func (o *outputs) writePath(flag, path string, save func(tmp string) error) error {
	return o.stage(flag, path, func(f tempFile) error {
		if err := f.Close(); err != nil {
			return err
		}
		return save(f.Name())
	})
}

func (o *outputs) stage(flag, path string, fill func(f tempFile) error) error {
	if err := o.ctx.Err(); err != nil {
		return err
	}
	if o.done {
		return outErr(flag, path, "internal: outputs already committed")
	}
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return outErr(flag, path, "is a directory, want a file")
	}
	// A symbolic link at path: the file it names is replaced, not it.
	target := path
	if st, err := os.Lstat(path); err == nil && st.Mode()&fs.ModeSymlink != 0 {
		if t, err := filepath.EvalSymlinks(path); err == nil {
			target = t
		}
	}
	stream := special(path)
	dir := filepath.Dir(target)
	if stream {
		dir = os.TempDir()
	} else if err := o.mkdirAll(dir); err != nil {
		return outErr(flag, path, "cannot make its folder: %s", plainPathError(err))
	}
	f, err := o.fs.createTemp(dir, "."+filepath.Base(target)+".tmp-*")
	if err != nil {
		return outErr(flag, path, "%s", plainPathError(err))
	}
	tmp := f.Name()
	live.add(tmp, false)
	err = fill(f)
	if cerr := f.Close(); err == nil && cerr != nil && !errors.Is(cerr, os.ErrClosed) {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		live.remove(tmp)
		if o.ctx.Err() != nil {
			return o.ctx.Err()
		}
		return outErr(flag, path, "%s", plainPathError(err))
	}
	o.files = append(o.files, stagedFile{flag: flag, path: path, target: target, tmp: tmp, stream: stream})
	return nil
}

// commit renames every staged file over its target. When a rename fails
// the targets already renamed are put back as they were (a file that was
// there is restored from a hard link kept until the end), and nothing
// new is left. Once ctx is done nothing is committed.
func (o *outputs) commit() error {
	if o.done {
		return nil
	}
	if err := o.ctx.Err(); err != nil {
		o.abort()
		return err
	}
	var streams []stagedFile
	o.files = slices.DeleteFunc(o.files, func(f stagedFile) bool {
		if f.stream {
			streams = append(streams, f)
		}
		return f.stream
	})
	backups := make([]string, len(o.files))
	existed := make([]bool, len(o.files))
	for i, f := range o.files {
		st, err := os.Lstat(f.target)
		if err != nil {
			continue
		}
		existed[i] = true
		if st.Mode().IsRegular() {
			b := f.tmp + ".old"
			if os.Link(f.target, b) == nil {
				backups[i] = b
				live.add(b, false)
			}
		}
	}
	for i, f := range o.files {
		if err := o.fs.rename(f.tmp, f.target); err != nil {
			var lost []string
			for j := i - 1; j >= 0; j-- {
				g := o.files[j]
				switch {
				case backups[j] != "":
					if os.Rename(backups[j], g.target) != nil {
						lost = append(lost, g.path)
					}
				case !existed[j]:
					os.Remove(g.target)
				default:
					lost = append(lost, g.path)
				}
			}
			o.files = append(o.files[i:], streams...)
			o.cleanup(backups)
			msg := "nothing was written"
			if len(lost) > 0 {
				msg = "replaced and not restored: " + strings.Join(lost, ", ")
			}
			return outErr(f.flag, f.path, "%s (%s)", plainPathError(err), msg)
		}
		live.remove(f.tmp)
	}
	for _, b := range backups {
		if b != "" {
			os.Remove(b)
			live.remove(b)
		}
	}
	syncDirs(o.files)
	for i, f := range streams {
		if err := writeInto(f.tmp, f.path); err != nil {
			o.files = append(o.files[:0], streams[i:]...)
			o.cleanup(nil)
			return outErr(f.flag, f.path, "%s", plainPathError(err))
		}
		os.Remove(f.tmp)
		live.remove(f.tmp)
	}
	for _, d := range o.dirs {
		live.remove(d)
	}
	o.files, o.dirs, o.done = nil, nil, true
	return nil
}

// abort removes the staged files and the folders made for them: nothing
// new is left. After commit it does nothing.
func (o *outputs) abort() {
	if o.done {
		return
	}
	o.cleanup(nil)
}

func (o *outputs) cleanup(backups []string) {
	for _, f := range o.files {
		os.Remove(f.tmp)
		live.remove(f.tmp)
	}
	for _, b := range backups {
		if b != "" {
			os.Remove(b)
			live.remove(b)
		}
	}
	for _, d := range slices.Backward(o.dirs) {
		os.Remove(d) // only if empty
		live.remove(d)
	}
	o.files, o.dirs, o.done = nil, nil, true
}

// writeInto copies the file tmp into path, an existing file that is not a
// regular one (a device, a FIFO, a pipe): opened for writing, never
// created, truncated or replaced.
func writeInto(tmp, path string) error {
	src, err := os.Open(tmp)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = io.Copy(dst, src)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	return err
}

// syncDirs flushes the folders of the renamed files (best effort: the
// renames are then durable).
func syncDirs(files []stagedFile) {
	var seen []string
	for _, f := range files {
		d := filepath.Dir(f.target)
		if slices.Contains(seen, d) {
			continue
		}
		seen = append(seen, d)
		if h, err := os.Open(d); err == nil {
			h.Sync()
			h.Close()
		}
	}
}

// ctxWriter fails with ctx's error once ctx is done: a large output stops
// being written soon after an interrupt.
type ctxWriter struct {
	ctx context.Context
	w   io.Writer
}

func (c ctxWriter) Write(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.w.Write(p)
}

// live are the temporary files and folders of uncommitted outputs, which
// a second signal removes before flashvk exits at once.
var live = &liveOutputs{}

type liveOutputs struct {
	mu    sync.Mutex
	files map[string]bool
	dirs  []string
}

func (l *liveOutputs) add(path string, dir bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if dir {
		l.dirs = append(l.dirs, path)
		return
	}
	if l.files == nil {
		l.files = map[string]bool{}
	}
	l.files[path] = true
}

func (l *liveOutputs) remove(path string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.files, path)
	if i := slices.Index(l.dirs, path); i >= 0 {
		l.dirs = slices.Delete(l.dirs, i, i+1)
	}
}

// removeAll removes every temporary file, then the folders made for
// outputs (those that are empty), deepest first.
func (l *liveOutputs) removeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for f := range l.files {
		os.Remove(f)
	}
	for _, d := range slices.Backward(l.dirs) {
		os.Remove(d)
	}
	l.files, l.dirs = nil, nil
}
