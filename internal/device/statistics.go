//go:build cgo

package device

/*
#include <stdlib.h>
#include "vk.h"
*/
import "C"

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unsafe"
)

// StatisticFormat is the type of a Statistic's value
// (VkPipelineExecutableStatisticFormatKHR).
type StatisticFormat int32

const (
	StatBool    StatisticFormat = 0 // Value is a bool
	StatInt64   StatisticFormat = 1 // Value is an int64
	StatUint64  StatisticFormat = 2 // Value is a uint64
	StatFloat64 StatisticFormat = 3 // Value is a float64
)

func (f StatisticFormat) String() string {
	switch f {
	case StatBool:
		return "bool"
	case StatInt64:
		return "int64"
	case StatUint64:
		return "uint64"
	case StatFloat64:
		return "float64"
	}
	return fmt.Sprintf("StatisticFormat(%d)", int32(f))
}

// Statistic is one compiler statistic of a pipeline executable, as the
// driver reports it through VK_KHR_pipeline_executable_properties. Names
// and their meaning are the driver's own: NVIDIA reports e.g. "Register
// Count", RADV "VGPRs", "SGPRs", "Spilled VGPRs", "LDS size", ANV
// "Spill count" and "Scratch Memory Size".
type Statistic struct {
	// Executable is the index of the pipeline executable (Executables)
	// the statistic is of; a compute pipeline usually has one, 0.
	Executable  int
	Name        string
	Description string
	Format      StatisticFormat
	// Value is a bool, int64, uint64 or float64, after Format (the
	// bits as a uint64 for a format this package does not know).
	Value any
}

// ValueString is the value as text: "true", "-3", "128", "0.75".
func (s Statistic) ValueString() string {
	switch v := s.Value.(type) {
	case bool:
		return strconv.FormatBool(v)
	case int64:
		return strconv.FormatInt(v, 10)
	case uint64:
		return strconv.FormatUint(v, 10)
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	return fmt.Sprint(s.Value)
}

// String is "name: value", e.g. "Register Count: 128".
func (s Statistic) String() string { return s.Name + ": " + s.ValueString() }

// Executable is one of the executables the driver compiled a pipeline
// into (VkPipelineExecutablePropertiesKHR) with its statistics.
type Executable struct {
	Name, Description string
	// SubgroupSize is the subgroup size it runs with (0: unknown).
	SubgroupSize uint32
	Statistics   []Statistic
}

// Executables returns the pipeline's executables (one for a compute
// pipeline on most drivers) with their compiler statistics. It needs a
// device opened with Options.PipelineStatistics that supports
// VK_KHR_pipeline_executable_properties (Info.PipelineStatistics):
// otherwise the error wraps ErrUnsupported and says which is missing.
func (p *Pipeline) Executables() ([]Executable, error) {
	d := p.d
	if err := d.use(); err != nil {
		return nil, err
	}
	defer d.done()
	if !d.info.PipelineStatistics {
		if !d.statsSupported {
			return nil, fmt.Errorf("%w: %s: %s reports no compiler statistics (no VK_KHR_pipeline_executable_properties with pipelineExecutableInfo)",
				ErrUnsupported, p.name, d.info.Name)
		}
		return nil, fmt.Errorf("%w: %s: compiler statistics were not enabled: open the device with Options.PipelineStatistics",
			ErrUnsupported, p.name)
	}
	// Under lmu, so that Close cannot destroy the pipeline meanwhile.
	d.lmu.Lock()
	defer d.lmu.Unlock()
	if p.closed.Load() {
		return nil, ErrClosed
	}
	var n C.uint32_t
	var cex *C.fvk_executable
	if r := C.fvk_pipeline_executables(d.c, p.p, &n, &cex); r != 0 {
		return nil, fmt.Errorf("device: %s: %w", p.name, d.check("vkGetPipelineExecutablePropertiesKHR", r))
	}
	defer C.free(unsafe.Pointer(cex))
	var out []Executable
	for i, ce := range unsafe.Slice(cex, int(n)) {
		ex := Executable{
			Name:         strings.TrimSpace(C.GoString(&ce.name[0])),
			Description:  strings.TrimSpace(C.GoString(&ce.description[0])),
			SubgroupSize: uint32(ce.subgroup_size),
		}
		var m C.uint32_t
		var cst *C.fvk_statistic
		if r := C.fvk_pipeline_statistics(d.c, p.p, C.uint32_t(i), &m, &cst); r != 0 {
			return nil, fmt.Errorf("device: %s: %w", p.name, d.check("vkGetPipelineExecutableStatisticsKHR", r))
		}
		for _, cs := range unsafe.Slice(cst, int(m)) {
			ex.Statistics = append(ex.Statistics, statisticFromC(i, &cs))
		}
		C.free(unsafe.Pointer(cst))
		out = append(out, ex)
	}
	return out, nil
}

// Statistics returns the compiler statistics of the pipeline's
// executables, one list after the other in executable order (each
// Statistic says which it is of; a compute pipeline usually has one
// executable). It fails as Executables does.
func (p *Pipeline) Statistics() ([]Statistic, error) {
	exs, err := p.Executables()
	if err != nil {
		return nil, err
	}
	var out []Statistic
	for _, ex := range exs {
		out = append(out, ex.Statistics...)
	}
	return out, nil
}

func statisticFromC(exec int, c *C.fvk_statistic) Statistic {
	s := Statistic{
		Executable:  exec,
		Name:        strings.TrimSpace(C.GoString(&c.name[0])),
		Description: strings.TrimSpace(C.GoString(&c.description[0])),
		Format:      StatisticFormat(c.format),
	}
	bits := uint64(c.bits)
	switch s.Format {
	case StatBool:
		s.Value = bits != 0
	case StatInt64:
		s.Value = int64(bits)
	case StatUint64:
		s.Value = bits
	case StatFloat64:
		s.Value = math.Float64frombits(bits)
	default:
		s.Value = bits
	}
	return s
}
