package attention

import "errors"

// Sentinel errors. Every error returned for bad input wraps one of these and
// names the offending argument, e.g. "attention: k: head dim 32 ≠ q's 64: bad shape".
var (
	// ErrShape: dimensions that are zero, too large or disagree between operands.
	ErrShape = errors.New("bad shape")
	// ErrStride: strides that are negative, overlap in an output, or reach
	// past the end of the data.
	ErrStride = errors.New("bad strides")
	// ErrLength: a slice shorter (or, for LSE, of another length) than the shape needs.
	ErrLength = errors.New("bad slice length")
	// ErrDType: an unknown data type, mixed types, or one the backend cannot run.
	ErrDType = errors.New("unsupported data type")
	// ErrOption: an option out of range (NaN scale, unknown alignment…).
	ErrOption = errors.New("bad option")
	// ErrBackend: the requested backend or device is not available.
	ErrBackend = errors.New("backend unavailable")
	// ErrClosed: the engine (or a tensor) was used after Close.
	ErrClosed = errors.New("closed")
)
