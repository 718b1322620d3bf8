package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"

	"github.com/outbox-bridge/bridge/internal/config"
	"github.com/outbox-bridge/bridge/internal/outbox"
)

// manyTables is the annotation of the commands that act on several outbox
// tables (database.tables, --table repeated or a pattern); the others
// refuse them (checkOneTable).
const manyTables = "many-tables"

// acceptsManyTables marks cmd as one that acts on every table configured.
func acceptsManyTables(cmd *cobra.Command) *cobra.Command {
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	cmd.Annotations[manyTables] = "yes"
	return cmd
}

// checkOneTable refuses several tables or a pattern for a command that
// works on one table.
func checkOneTable(cmd *cobra.Command, cfg *config.Config) error {
	if len(cfg.Database.Tables) == 0 || cmd.Annotations[manyTables] != "" {
		return nil
	}
	var many []string
	for _, sub := range cmd.Root().Commands() {
		if sub.Annotations[manyTables] != "" {
			many = append(many, "bridge "+sub.Name())
		}
	}
	return usage("--table %s: %s works on one outbox table; several tables or a pattern are for %s",
		strings.Join(cfg.Database.Tables, " --table "), cmd.CommandPath(), strings.Join(many, ", "))
}

// resolveTables returns the outbox tables cfg names, in the order given,
// each pattern replaced by the bridge tables of db it matches
// (outbox.DB.ResolveTables). A pattern that matches nothing is logged as
// a warning; when nothing at all is matched the error says so.
func resolveTables(ctx context.Context, db *outbox.DB, cfg *config.Config, logger *slog.Logger) ([]string, error) {
	tables, unmatched, err := db.ResolveTables(ctx, cfg.TableNames())
	if err != nil {
		return nil, err
	}
	if len(tables) == 0 {
		return nil, usage("--table %s: no outbox table in %s matches (a pattern matches the tables bridge migrate made)",
			strings.Join(cfg.TableNames(), " --table "), db.Redacted)
	}
	for _, name := range unmatched {
		logger.Warn("no outbox table matches the pattern", slog.String("table", name), slog.String("database", db.Redacted))
	}
	return tables, nil
}

// inTable is what a command's line of output adds when the command acts
// on several tables: which one the line is about.
func inTable(store *outbox.Store, many bool) string {
	if !many {
		return ""
	}
	return fmt.Sprintf(" in %s", store.Table())
}
