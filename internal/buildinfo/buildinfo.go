// Package buildinfo says which build of the bridge is running: its module
// version, the VCS commit it was built from and that commit's time. The
// same values are printed by `bridge version`, exported as the gauge
// bridge_build_info and logged by `bridge run` first.
//
// A release sets them with the linker (GoReleaser does, see
// .goreleaser.yaml):
//
//	go build -ldflags "-X github.com/outbox-bridge/bridge/internal/buildinfo.version=v1.2.3
//	  -X github.com/outbox-bridge/bridge/internal/buildinfo.commit=<hash>
//	  -X github.com/outbox-bridge/bridge/internal/buildinfo.date=<RFC 3339>" ./cmd/bridge
//
// Otherwise they come from the Go build information (runtime/debug):
// `go install …/cmd/bridge@v1.2.3` records the module version (and a
// pseudo-version's commit and time); a build inside a git checkout records
// vcs.revision and vcs.time, unless -buildvcs=false. What is not known is
// reported as "unknown", never guessed.
package buildinfo

import (
	"runtime"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/mod/module"
)

// Set with -ldflags "-X github.com/outbox-bridge/bridge/internal/buildinfo.NAME=VALUE".
var (
	version string
	commit  string
	date    string
)

// Unknown stands for a value the build did not record.
const Unknown = "unknown"

// Info describes the running build.
type Info struct {
	// Version is the module version (v1.2.3, or a pseudo-version), or
	// "(devel)" for a build of a checkout without -ldflags.
	Version string
	// Commit is the VCS revision, or Unknown.
	Commit string
	// Date is the time of the commit (RFC 3339, UTC), or Unknown.
	Date string
	// Modified reports a build from a checkout with uncommitted changes.
	Modified bool
	// GoVersion is the Go toolchain that built the binary (runtime.Version).
	GoVersion string
}

// Read returns the running build's Info: the -ldflags values first, then
// the Go build information.
func Read() Info {
	info := Info{Version: "(devel)", Commit: Unknown, Date: Unknown, GoVersion: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		info = fromBuildInfo(bi, info)
	}
	if version != "" {
		info.Version = version
	}
	if commit != "" {
		info.Commit = commit
	}
	if date != "" {
		info.Date = date
	}
	return info
}

// fromBuildInfo fills info from the Go build information: the main
// module's version, the VCS settings of a checkout build, and the commit
// and time a pseudo-version carries.
func fromBuildInfo(bi *debug.BuildInfo, info Info) Info {
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		info.Version = v
		if module.IsPseudoVersion(v) {
			if rev, err := module.PseudoVersionRev(v); err == nil {
				info.Commit = rev
			}
			if t, err := module.PseudoVersionTime(v); err == nil {
				info.Date = t.UTC().Format(time.RFC3339)
			}
		}
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Commit = s.Value
		case "vcs.time":
			info.Date = s.Value
		case "vcs.modified":
			info.Modified = s.Value == "true"
		}
	}
	return info
}

// String is the one-line form `bridge version` prints:
// "v1.2.3 (commit 0123abcd…, 2026-11-30T12:00:00Z, go1.26.8 linux/amd64)".
func (i Info) String() string {
	c := i.Commit
	if i.Modified {
		c += "-modified"
	}
	return i.Version + " (commit " + c + ", " + i.Date + ", " + i.GoVersion + " " + runtime.GOOS + "/" + runtime.GOARCH + ")"
}

// Collector is the gauge bridge_build_info: always 1, with the build's
// version, commit, commit time, modified flag and Go version as labels
// (what `bridge version` prints), so that a dashboard can tell which build
// each replica runs.
func (i Info) Collector() prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "bridge_build_info",
		Help: "Always 1; the labels say which build runs: module version, VCS commit, commit time, Go version.",
		ConstLabels: prometheus.Labels{"version": i.Version, "commit": i.Commit, "commit_time": i.Date,
			"modified": strconv.FormatBool(i.Modified), "goversion": i.GoVersion},
	}, func() float64 { return 1 })
}
