package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	t.Parallel()
	base := Info{Version: "(devel)", Commit: Unknown, Date: Unknown}
	for _, tc := range []struct {
		name string
		bi   debug.BuildInfo
		want Info
	}{
		{"checkout without VCS stamping (-buildvcs=false)", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}},
			Info{Version: "(devel)", Commit: Unknown, Date: Unknown}},
		{"checkout with VCS stamping", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"}, {Key: "vcs.time", Value: "2026-11-30T12:00:00Z"}, {Key: "vcs.modified", Value: "true"}}},
			Info{Version: "(devel)", Commit: "0123456789abcdef0123456789abcdef01234567", Date: "2026-11-30T12:00:00Z", Modified: true}},
		{"go install of a tag", debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}},
			Info{Version: "v1.2.3", Commit: Unknown, Date: Unknown}},
		{"go install of an untagged commit", debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261130120000-0123456789ab"}},
			Info{Version: "v0.0.0-20261130120000-0123456789ab", Commit: "0123456789ab", Date: "2026-11-30T12:00:00Z"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := fromBuildInfo(&tc.bi, base); got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestLinkerValuesWin(t *testing.T) {
	version, commit, date = "v9.9.9", "feedface", "2026-12-01T00:00:00Z"
	t.Cleanup(func() { version, commit, date = "", "", "" })
	got := Read()
	if got.Version != "v9.9.9" || got.Commit != "feedface" || got.Date != "2026-12-01T00:00:00Z" {
		t.Errorf("Read() = %+v, want the -ldflags values", got)
	}
}
