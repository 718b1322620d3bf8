package outbox

import (
	"fmt"
	"strings"
)

// ErrUnknownDialect is returned (wrapped) by MigrationScript for a dialect
// that is not one of Dialects.
var ErrUnknownDialect = fmt.Errorf("unknown database dialect; accepted: %s", dialectList())

func dialectList() string {
	names := make([]string, len(Dialects))
	for i, d := range Dialects {
		names[i] = string(d)
	}
	return strings.Join(names, ", ")
}

// MigrationScript returns the SQL that Migrate would run on a database of
// dialect (one of Dialects) for table, for a DBA who applies schema changes
// by hand: each embedded migration after version after (0: all of them),
// rendered for table, followed by the statement that records its version in
// the migrations table <table>_migrations as Migrate records it, so that a
// later `bridge migrate` finds the table up to date and the relay does not
// warn that its schema is behind. With after 0 the script first creates the
// migrations table (goose's layout: id, version_id, is_applied, tstamp,
// with the row of version 0 goose writes when it creates the table).
//
// On PostgreSQL and SQLite each migration and its record run in one
// transaction, except a migration that cannot run in one (DROP INDEX
// CONCURRENTLY), which runs before its record; MySQL commits each DDL statement by itself, so there the
// statements run one after another. The script holds no database-specific
// client command: psql, mariadb/mysql and sqlite3 read it from stdin.
// TestMigrationScriptMatchesMigrate applies it and checks what Migrate
// sees.
func MigrationScript(dialect Dialect, table string, after int64) (string, error) {
	d, ok := driverOf(dialect)
	if !ok {
		return "", fmt.Errorf("%w: %q", ErrUnknownDialect, dialect)
	}
	t, err := ParseTableName(table)
	if err != nil {
		return "", err
	}
	rendered, err := renderSQL(d, t)
	if err != nil {
		return "", err
	}
	versions := t.String() + "_migrations"
	spec := d.migrations()
	transactional := d.capabilities().TransactionalDDL
	var b strings.Builder
	fmt.Fprintf(&b, "-- outbox table %s on %s: the migrations `bridge migrate` applies", t, d.dialect())
	if after > 0 {
		fmt.Fprintf(&b, " after version %d", after)
	}
	fmt.Fprintf(&b, ",\n-- each recorded in %s as bridge migrate records it.\n", versions)
	if after <= 0 {
		fmt.Fprintf(&b, "\n-- The migrations table (goose's layout).\n%s;\nINSERT INTO %s (version_id, is_applied) VALUES (0, %s);\n",
			spec.versionTableDDL(versions), versions, spec.trueLiteral)
	}
	printed, latest := 0, int64(0)
	for _, m := range rendered {
		latest = max(latest, m.version)
		if m.version <= after {
			continue
		}
		printed++
		fmt.Fprintf(&b, "\n-- Migration %05d (%s).\n", m.version, m.file)
		if transactional && !m.noTx {
			b.WriteString("BEGIN;\n")
		}
		b.WriteString(strings.TrimRight(m.sql, "; \n\t"))
		b.WriteString(";\n")
		fmt.Fprintf(&b, "INSERT INTO %s (version_id, is_applied) VALUES (%d, %s);\n", versions, m.version, spec.trueLiteral)
		if transactional && !m.noTx {
			b.WriteString("COMMIT;\n")
		}
	}
	if printed == 0 {
		fmt.Fprintf(&b, "\n-- Nothing to apply: %d is the latest migration of this bridge, and --after %d is not below it.\n", latest, after)
	}
	return b.String(), nil
}

// DialectOfURL returns the dialect (one of Dialects) of a database URL that
// Open accepts, from its scheme alone: nothing is opened. Errors:
// ErrUnknownScheme (wrapped) as Open returns it.
func DialectOfURL(rawURL string) (Dialect, error) {
	if _, d, ok := SchemeOf(rawURL); ok {
		return d, nil
	}
	return "", fmt.Errorf("%w: %q; accepted: %s", ErrUnknownScheme, RedactURL(rawURL), AcceptedSchemes)
}
