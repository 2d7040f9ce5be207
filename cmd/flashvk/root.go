package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"

	"github.com/flashvk/flashvk/attention"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// app carries what every command shares: the output streams and the
// hooks tests replace.
type app struct {
	stdout, stderr io.Writer
	// gpus lists the Vulkan devices (attention.Devices; tests replace it).
	gpus func() ([]attention.DeviceInfo, error)
	// stderrTTY reports whether stderr is a terminal (progress bars).
	stderrTTY bool
	// beforeInputs, when set, is called by run, bench and tune once every
	// flag and output path is checked and every pass planned, just before
	// the inputs are made or read (tests).
	beforeInputs func()
	// outFS, when set, replaces how output files are created and renamed
	// (tests: a full disk, a failed rename).
	outFS *outputFS
}

// usageError marks an error in the command line itself (exit status 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// exitError ends the program with a status and no further message: the
// command has already printed why (a failed check, for instance).
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// execute runs flashvk with args and returns the process exit status:
// 0 success, 1 failure (including a failed check), 2 bad usage; a command
// stopped because ctx was cancelled by a signal (see handleSignals) 128 +
// the signal's number: 130 for SIGINT, 143 for SIGTERM.
func execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return newApp(stdout, stderr).execute(ctx, args)
}

func newApp(stdout, stderr io.Writer) *app {
	return &app{stdout: stdout, stderr: stderr, gpus: listDevices, stderrTTY: isTerminal(stderr)}
}

// listDevices lists the Vulkan devices with the environment's loader.
func listDevices() ([]attention.DeviceInfo, error) { return attention.Devices(attention.Config{}) }

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func (a *app) execute(ctx context.Context, args []string) (code int) {
	defer func() {
		// Every input is validated; this is a last line of defence so a
		// bug still ends in one line and a non-zero status.
		if r := recover(); r != nil {
			fmt.Fprintf(a.stderr, "flashvk: internal error: %s\n", oneLine(fmt.Sprint(r)))
			code = 1
		}
	}()
	root := a.rootCmd()
	root.SetArgs(spaceValues(root, args))
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	if ctx.Err() != nil {
		return a.interrupted(ctx, err)
	}
	var ex exitError
	if errors.As(err, &ex) {
		return ex.code
	}
	fmt.Fprintf(a.stderr, "flashvk: %s\n", oneLine(err.Error()))
	var ue usageError
	if errors.As(err, &ue) || isCobraUsage(err) {
		return 2
	}
	return 1
}

// isCobraUsage recognises the argument errors cobra returns unwrapped.
func isCobraUsage(err error) bool {
	s := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand", "accepts ", "requires at least", "invalid argument", "flag needs an argument", "required flag"} {
		if strings.Contains(s, p) {
			return true
		}
	}
	return false
}

func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "flashvk",
		Short: "Exact attention (FlashAttention forward and backward) on Vulkan or the CPU",
		Long: `flashvk runs, checks, benchmarks and explains flashvk's exact attention:
O = softmax(scale·QKᵀ + mask)·V and its gradients, computed in tiles with an
online softmax so the Nq×Nk score matrix is never materialised.

Backends: "vulkan" (GLSL compute shaders on a Vulkan device) and "cpu" (pure
Go). "auto" picks a Vulkan device when one can be opened, else the CPU.

Shapes follow FlashAttention: Q [B, Nq, Hq, d], K [B, Nk, Hkv, d],
V [B, Nk, Hkv, dv]; Hq must be a multiple of Hkv (grouped-query attention).

Files a command writes (run --out, bench --json, tune's cache and --json,
report -o and --markdown) are written all or none: their paths are checked
before any work, and they are renamed into place only once every one is
complete; a command that fails leaves no new file and every existing one
as it was.

Exit status: 0 success; 1 failure (a failed --check included); 2 a usage
error, a flag that would change nothing in the given combination included;
130 or 143 stopped by SIGINT or SIGTERM (within about a second, writing
nothing); a second signal exits at once with its own status.`,
		Version:       version(),
		SilenceUsage:  true,
		SilenceErrors: true,
		// Without a subcommand, print the help (and succeed).
		Run: func(cmd *cobra.Command, args []string) { _ = cmd.Help() },
	}
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.SetVersionTemplate("flashvk {{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.Args = cobra.NoArgs
	root.AddCommand(a.devicesCmd(), a.runCmd(), a.benchCmd(), a.compareCmd(), a.reportCmd(), a.explainCmd(), a.tuneCmd())
	for _, c := range root.Commands() {
		c.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	}
	return root
}

// version is the module version flashvk was built from ("devel" for a
// build from a work tree).
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok || bi.Main.Version == "" || bi.Main.Version == "(devel)" {
		if ok {
			for _, s := range bi.Settings {
				if s.Key == "vcs.revision" && len(s.Value) >= 12 {
					return "devel-" + s.Value[:12]
				}
			}
		}
		return "devel"
	}
	return bi.Main.Version
}

// oneLine folds a multi-line message onto one line.
func oneLine(s string) string {
	s = strings.TrimSpace(s)
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", "; ")), " ")
}

// usagef returns a usage error.
func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// printJSON writes v to stdout as indented JSON.
func (a *app) printJSON(v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "%s\n", b)
	return nil
}
