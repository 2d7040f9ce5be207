package main

// The flags every command that describes a problem shares: one
// registration and one parser per flag, so that --dim, --seq, --causal,
// --dtype … mean the same on run, explain, bench and tune.

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/flashvk/flashvk/attention"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// listValue is a flag of one value, or where the command takes a set
// (bench, tune) a comma-separated list of values. Repeating a list flag
// appends; its first use replaces the default.
type listValue[T any] struct {
	vals    *[]T
	multi   bool
	changed bool
	typ     string // what --help shows: "int", "dtype"; a list adds "s"
	parse   func(string) (T, error)
	format  func(T) string
}

func (v *listValue[T]) Set(s string) error {
	parts := strings.Split(s, ",")
	if !v.multi && len(parts) != 1 {
		return errors.New("takes one value")
	}
	var xs []T
	for _, p := range parts {
		x, err := v.parse(strings.TrimSpace(p))
		if err != nil {
			return err
		}
		xs = append(xs, x)
	}
	if !v.changed || !v.multi {
		*v.vals = nil
	}
	v.changed = true
	*v.vals = append(*v.vals, xs...)
	return nil
}

func (v *listValue[T]) String() string {
	s := make([]string, len(*v.vals))
	for i, x := range *v.vals {
		s[i] = v.format(x)
	}
	return strings.Join(s, ",")
}

func (v *listValue[T]) Type() string {
	if v.multi {
		return v.typ + "s"
	}
	return v.typ
}

// intsValue is an integer flag (see listValue).
func intsValue(vals *[]int, multi bool) *listValue[int] {
	return &listValue[int]{vals: vals, multi: multi, typ: "int", format: strconv.Itoa,
		parse: func(s string) (int, error) {
			x, err := strconv.Atoi(s)
			if err != nil {
				return 0, fmt.Errorf("%q is not an integer", s)
			}
			return x, nil
		}}
}

// dtypesValue is --dtype (see listValue): float32, float16 or bfloat16,
// or f32/fp32, f16/fp16, bf16.
func dtypesValue(vals *[]attention.DType, multi bool) *listValue[attention.DType] {
	return &listValue[attention.DType]{vals: vals, multi: multi, typ: "dtype", format: attention.DType.String,
		parse: func(s string) (attention.DType, error) {
			dt, err := attention.ParseDType(strings.ToLower(s))
			if err != nil {
				return 0, fmt.Errorf("%q: want float32, float16 or bfloat16 (f32, f16, bf16)", s)
			}
			return dt, nil
		}}
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

// causalValue is --causal: true or false, and where a command takes a set
// of masks (bench, tune) also both. A bare --causal means true, and the
// value may follow after a space (--causal false): see spaceValues.
type causalValue struct {
	vals  []bool
	multi bool
}

func (c *causalValue) Set(s string) error {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "true", "1", "yes":
		c.vals = []bool{true}
	case "false", "0", "no":
		c.vals = []bool{false}
	case "both":
		if !c.multi {
			return errors.New("want true or false (this command runs one mask)")
		}
		c.vals = []bool{false, true}
	default:
		if c.multi {
			return errors.New("want true, false or both")
		}
		return errors.New("want true or false")
	}
	return nil
}

func (c *causalValue) String() string {
	switch {
	case len(c.vals) == 2:
		return "both"
	case len(c.vals) == 1:
		return strconv.FormatBool(c.vals[0])
	}
	return ""
}

func (c *causalValue) Type() string {
	if c.multi {
		return "true|false|both"
	}
	return "true|false"
}

// word reports whether s, after a bare --causal, is its value (for
// spaceValues): anything but a flag, since no command with --causal takes
// arguments. A word that is not a mask ("maybe", or "both" on a one-mask
// command) is then refused with the flag's name, not read as an argument.
func (c *causalValue) word(s string) bool { return s != "" && !strings.HasPrefix(s, "-") }

// one is the single mask of a one-mask command.
func (c *causalValue) one() bool { return len(c.vals) == 1 && c.vals[0] }

// spaceValues rewrites "--flag value" into "--flag=value" for the flags of
// the command args run whose value is optional (--causal: a bare --causal
// means true) when value is the flag's word (see causalValue.word). pflag
// would otherwise read the value as an argument ("unknown command false").
// The values of other flags are skipped, and so is everything after "--".
func spaceValues(root *cobra.Command, args []string) []string {
	cmd, _, err := root.Find(args)
	if err != nil || cmd == nil {
		return args
	}
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		out = append(out, a)
		if a == "--" {
			return append(out, args[i+1:]...)
		}
		var fl *pflag.Flag
		switch {
		case strings.HasPrefix(a, "--") && !strings.Contains(a, "="):
			fl = cmd.Flags().Lookup(a[2:])
		case len(a) == 2 && a[0] == '-' && a[1] != '-':
			fl = cmd.Flags().ShorthandLookup(a[1:])
		}
		if fl == nil || i+1 >= len(args) {
			continue
		}
		if w, ok := fl.Value.(interface{ word(string) bool }); ok {
			if w.word(args[i+1]) {
				out[len(out)-1] = "--" + fl.Name + "=" + args[i+1]
				i++
			}
			continue
		}
		if fl.NoOptDefVal == "" {
			// The flag's own value: never a flag to rewrite.
			out = append(out, args[i+1])
			i++
		}
	}
	return out
}

// intFlag is a named integer for the range checks of the commands.
type intFlag struct {
	name string
	v    int
}

// positive refuses values < 1, naming the flag.
func positive(fs ...intFlag) error {
	for _, f := range fs {
		if f.v < 1 {
			return usagef("%s %d: must be positive", f.name, f.v)
		}
	}
	return nil
}

// nonNegative refuses values < 0, naming the flag.
func nonNegative(fs ...intFlag) error {
	for _, f := range fs {
		if f.v < 0 {
			return usagef("%s %d: must be ≥ 0", f.name, f.v)
		}
	}
	return nil
}

// eachPositive refuses a list flag with a value < 1.
func eachPositive(name string, xs []int) error {
	for _, x := range xs {
		if err := positive(intFlag{name, x}); err != nil {
			return err
		}
	}
	return nil
}

// timingFlags are --warmup and --iters of run and bench.
type timingFlags struct{ warmup, iters int }

func (t *timingFlags) register(c *cobra.Command, iters int, itersHelp string) {
	c.Flags().IntVar(&t.warmup, "warmup", 3, "untimed calls before timing (0 is taken as 3; on Vulkan the warm-up also lasts at least 500 ms)")
	c.Flags().IntVar(&t.iters, "iters", iters, itersHelp)
}

// warmupRun is the warm-up calls run and bench make: --warmup, 0 taken as
// the library's default 3 (what the results record).
func (t *timingFlags) warmupRun() int {
	if t.warmup == 0 {
		return 3
	}
	return t.warmup
}

func (t *timingFlags) check(minIters int) error {
	if err := nonNegative(intFlag{"--warmup", t.warmup}); err != nil {
		return err
	}
	if t.iters < minIters {
		return usagef("--iters %d: must be ≥ %d", t.iters, minIters)
	}
	return nil
}

// float32Value is a flag whose value the kernels take as a positive,
// finite float32 (--scale, --softcap). The value is kept rounded to
// float32, so the float64 reference of --check uses the very value the
// kernels do. 0 is refused with zero, which says what to give instead.
type float32Value struct {
	v    *float64
	what string // "the scale": what the kernels compute in float32
	zero string
}

func (s float32Value) Set(text string) error {
	x, err := strconv.ParseFloat(strings.TrimSpace(text), 64)
	var ne *strconv.NumError
	tooSmall := fmt.Errorf("rounds to 0 in float32 (the smallest positive is %.2g), the type the kernels compute %s in", math.SmallestNonzeroFloat32, s.what)
	switch {
	case err != nil && !(errors.As(err, &ne) && errors.Is(ne.Err, strconv.ErrRange)):
		return fmt.Errorf("%q is not a number", text)
	case math.IsNaN(x) || math.IsInf(x, 0) && err == nil:
		return errors.New("must be finite")
	case x == 0 && strings.ContainsAny(strings.SplitN(strings.ToLower(text), "e", 2)[0], "123456789"):
		return tooSmall
	case x == 0:
		return errors.New(s.zero)
	case x < 0:
		return errors.New("must be positive")
	}
	f := float32(x)
	switch {
	case math.IsInf(float64(f), 0):
		return fmt.Errorf("overflows float32 (the largest is %.4g), the type the kernels compute %s in", math.MaxFloat32, s.what)
	case f == 0:
		return tooSmall
	}
	*s.v = float64(f)
	return nil
}

func (s float32Value) String() string {
	if *s.v == 0 {
		return ""
	}
	return strconv.FormatFloat(*s.v, 'g', -1, 32)
}

func (s float32Value) Type() string { return "float" }

// scaleValue is --scale, the softmax scale (the library's Options.Scale).
// 0 is refused: it is the library's "default", which omitting --scale
// already selects.
func scaleValue(v *float64) float32Value {
	return float32Value{v: v, what: "the scale", zero: "0 is not a scale: omit --scale for the default 1/√d"}
}

// softcapValue is --softcap c: each scaled score s becomes c·tanh(s/c)
// (the library's Options.Softcap; omitting it is no softcap).
func softcapValue(v *float64) float32Value {
	return float32Value{v: v, what: "the softcap", zero: "0 is not a softcap: omit --softcap for none"}
}

// windowValue is --window L,R: each query sees the keys from L before its
// diagonal to R after it, −1 leaving a side unbounded (the library's
// Options.Window).
type windowValue struct{ w **[2]int }

func (v windowValue) Set(text string) error {
	parts := strings.Split(text, ",")
	if len(parts) != 2 {
		return errors.New("want L,R: two integers ≥ −1 (keys before and after the diagonal; −1 unbounded)")
	}
	var w [2]int
	for i, p := range parts {
		x, err := strconv.Atoi(strings.TrimSpace(p))
		switch {
		case err != nil:
			return fmt.Errorf("%q is not an integer: want L,R, two integers ≥ −1 (−1 unbounded)", p)
		case x < -1:
			return fmt.Errorf("%d: a side must be ≥ −1 (−1 unbounded)", x)
		}
		w[i] = x
	}
	*v.w = &w
	return nil
}

func (v windowValue) String() string {
	if *v.w == nil {
		return ""
	}
	return fmt.Sprintf("%d,%d", (*v.w)[0], (*v.w)[1])
}

func (v windowValue) Type() string { return "L,R" }

// dropoutValue is --dropout P: each attention probability is dropped with
// probability P and the kept ones scaled by 1/(1 − P) (the library's
// Options.Dropout). The library takes P as a float32 and applies it at a
// resolution of 2⁻⁸ (dropThreshold): 0 < P < 1, and P must round neither
// to 0 nor to 1 there (the library refuses both: they would drop nothing
// or every element). The value is kept as given.
type dropoutValue struct{ v *float64 }

func (d dropoutValue) Set(text string) error {
	x, err := strconv.ParseFloat(strings.TrimSpace(text), 64)
	switch {
	case err != nil:
		return fmt.Errorf("%q is not a number: want the probability P of dropping an attention probability, 0 < P < 1", text)
	case x == 0:
		return errors.New("0 is no dropout: omit --dropout for none")
	case !(x > 0 && x < 1):
		return fmt.Errorf("%v: want a probability 0 < P < 1 (the chance of dropping each attention probability)", x)
	case float32(x) == 1:
		return fmt.Errorf("%v rounds to 1 in float32, the type the library takes P in: want P < 1", x)
	case math.Round(float64(float32(x))*256) >= 256:
		return fmt.Errorf("%v would drop every element: the library applies P at a resolution of 2⁻⁸, and P ≥ 511/512 ≈ %.4g rounds to 1", x, 511.0/512)
	case dropThreshold(x) == 0:
		return fmt.Errorf("%v has no effect: the library applies P at a resolution of 2⁻⁸, and P below 2⁻⁹ ≈ %.3g drops nothing", x, math.Exp2(-9))
	}
	*d.v = x
	return nil
}

func (d dropoutValue) String() string {
	if *d.v == 0 {
		return ""
	}
	return strconv.FormatFloat(*d.v, 'g', -1, 64)
}

func (d dropoutValue) Type() string { return "P" }

// uintValue is a uint32 or uint64 flag (--dropout-offset, --dropout-seed)
// whose errors say the range.
type uintValue[T uint32 | uint64] struct{ v *T }

func (u uintValue[T]) Set(text string) error {
	bits := 64
	if ^T(0) == T(math.MaxUint32) {
		bits = 32
	}
	x, err := strconv.ParseUint(strings.TrimSpace(text), 10, bits)
	if err != nil {
		return fmt.Errorf("%q: want an integer 0 … %d", text, uint64(^T(0)))
	}
	*u.v = T(x)
	return nil
}

func (u uintValue[T]) String() string { return strconv.FormatUint(uint64(*u.v), 10) }

func (u uintValue[T]) Type() string {
	if ^T(0) == T(math.MaxUint32) {
		return "uint32"
	}
	return "uint64"
}
