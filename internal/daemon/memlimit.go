package daemon

import (
	"errors"
	"log/slog"
	"math"
	"os"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// SetMemoryLimit sets the Go runtime's soft memory limit (GOMEMLIMIT) to
// 90 % of the memory limit of the process's cgroup (a container's memory
// limit), so that the garbage collector works harder as the heap nears it
// instead of the kernel killing the process, and logs the limit. The Go
// runtime does not read the cgroup itself. A GOMEMLIMIT in the environment
// is kept; AUTOMEMLIMIT=off keeps the runtime's default, AUTOMEMLIMIT=0.8
// takes another share of the cgroup limit
// (github.com/KimMachineGun/automemlimit reads both).
func SetMemoryLimit(logger *slog.Logger) {
	limit, err := memlimit.Set()
	source := "cgroup"
	switch {
	case errors.Is(err, memlimit.ErrNoCgroup), errors.Is(err, memlimit.ErrCgroupsNotSupported):
		source = "none"
	case err != nil:
		logger.Warn("cannot read the cgroup memory limit; the Go runtime has no memory limit", slog.Any("error", err))
		return
	case os.Getenv("GOMEMLIMIT") != "":
		source = "GOMEMLIMIT"
	case os.Getenv("AUTOMEMLIMIT") == "off":
		source = "none"
	}
	if limit == math.MaxInt64 || source == "none" {
		logger.Info("Go memory limit: none (no cgroup memory limit)", slog.String("source", "none"))
		return
	}
	logger.Info("Go memory limit", slog.Int64("go_mem_limit_bytes", limit), slog.String("source", source))
}
