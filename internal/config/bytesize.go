package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/dustin/go-humanize"
)

// ByteSize is a size in bytes. A configuration value is a whole number of
// bytes (33554432) or a number with a unit, decimal (kB, MB, GB) or binary
// (KiB, MiB, GiB), as go-humanize's ParseBytes reads it ("32MiB", "64 MB").
type ByteSize int64

// Binary units of a ByteSize.
const (
	KiB ByteSize = 1 << 10
	MiB ByteSize = 1 << 20
	GiB ByteSize = 1 << 30
)

// String is the size in the unit that writes it in the fewest characters,
// binary or decimal ("32MiB", "64MB"), or in bytes ("1000");
// ParseByteSize reads it back.
func (b ByteSize) String() string {
	out := strconv.FormatInt(int64(b), 10)
	for _, u := range []struct {
		size int64
		name string
	}{{1 << 30, "GiB"}, {1e9, "GB"}, {1 << 20, "MiB"}, {1e6, "MB"}, {1 << 10, "KiB"}, {1e3, "kB"}} {
		if b == 0 || int64(b)%u.size != 0 {
			continue
		}
		if s := strconv.FormatInt(int64(b)/u.size, 10) + u.name; len(s) <= len(out) {
			out = s
		}
	}
	return out
}

// ParseByteSize reads a size: a whole number of bytes, or a number with a
// unit such as 32MiB or 64MB.
func ParseByteSize(s string) (ByteSize, error) {
	n, err := humanize.ParseBytes(strings.TrimSpace(s))
	if err != nil {
		return 0, err
	}
	if n > math.MaxInt64 {
		return 0, fmt.Errorf("%s is too large", s)
	}
	return ByteSize(n), nil
}
