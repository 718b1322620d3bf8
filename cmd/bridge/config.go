package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

func newConfigCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "config",
		Short: "Print the effective configuration, secrets redacted",
		Long: `Print the configuration that run would use, after the YAML file, BRIDGE_*
variables and flags, as YAML. Passwords, tokens and database URL passwords are
shown as REDACTED. Exits 2 naming the key when the configuration is invalid.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			redacted := cfg.Redacted()
			out, err := redacted.YAML()
			if err != nil {
				return err
			}
			fmt.Fprint(cmd.OutOrStdout(), string(out))
			return nil
		},
	}
}
