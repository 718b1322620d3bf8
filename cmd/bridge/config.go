package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/outbox-bridge/bridge/internal/config"
)

func newConfigCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Print the effective configuration, secrets redacted",
		Long: `Print the configuration that run would use, after the YAML file, BRIDGE_*
variables and flags, as YAML. Passwords, tokens and database URL passwords are
shown as REDACTED. relay.owner is shown as "" when it is the default, each
process's <hostname>-<pid>. Exits 2 naming the key when the configuration is
invalid.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			for _, name := range config.UnknownEnv(os.Environ()) {
				switch hint := config.EnvHint(name); {
				case kubernetesServiceLink(name):
				case hint != "":
					fmt.Fprintf(cmd.ErrOrStderr(), "warning: ignoring variable %s: %s\n", name, hint)
				default:
					fmt.Fprintf(cmd.ErrOrStderr(), "warning: ignoring unknown variable %s (misspelled?)\n", name)
				}
			}
			// Show what run would use: the embedded defaults spelled out.
			effective := *cfg
			effective.Database.URL = cfg.DatabaseURL()
			effective.Streams = cfg.EffectiveStreams()
			if config.DefaultOwner(cfg.Relay.Owner) {
				// This command's own hostname-pid is not what run will use;
				// "" gives every process its own, also when this output is
				// read back as a --config file.
				effective.Relay.Owner = ""
			}
			redacted := effective.Redacted()
			out, err := redacted.YAML()
			if err != nil {
				return err
			}
			fmt.Fprint(cmd.OutOrStdout(), string(out))
			return nil
		},
	}
	config.RegisterRelayFlags(cmd.Flags())
	return acceptsManyTables(cmd)
}
