package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/outbox-bridge/bridge/internal/buildinfo"
)

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit and commit time of this build",
		Long: `Print the module version, the VCS commit and the commit's time of this build, and
the Go toolchain that built it. A release sets them with -ldflags; otherwise they come
from the Go build information ("unknown" when the build did not record them, as with
go build -buildvcs=false). /metrics has the same values in bridge_build_info.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), "bridge "+buildinfo.Read().String())
			return nil
		},
	}
}
