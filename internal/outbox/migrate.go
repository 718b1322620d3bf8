package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"
)

// MigrationResult reports one applied migration.
type MigrationResult struct {
	Version int64
}

// Migrate creates or upgrades the outbox table and its indexes to the
// newest schema version, with goose. The migrations are the numbered SQL
// files embedded from migrations/<dialect>/, rendered for the table name;
// goose records applied versions in the table "<table>_migrations".
// It returns the migrations applied now (none when up to date).
//
// Every name is written unquoted, so the database resolves it as it
// resolves any unquoted name — PostgreSQL folds it to lower case, MySQL
// compares it as lower_case_table_names says, SQLite ignores ASCII case —
// and the version table is looked up the same way (migrationStore): run
// again with the same name in any case, Migrate finds the table it created.
func Migrate(ctx context.Context, db *DB, table string) ([]MigrationResult, error) {
	return migrate(ctx, db, table, func(p *goose.Provider) ([]*goose.MigrationResult, error) { return p.Up(ctx) })
}

// MigrateTo is Migrate up to schema version (inclusive) and no further:
// the table as a build of that version makes it, e.g. to rehearse a
// rolling upgrade. A version at or below the table's applies nothing.
func MigrateTo(ctx context.Context, db *DB, table string, version int64) ([]MigrationResult, error) {
	return migrate(ctx, db, table, func(p *goose.Provider) ([]*goose.MigrationResult, error) { return p.UpTo(ctx, version) })
}

func migrate(ctx context.Context, db *DB, table string, up func(*goose.Provider) ([]*goose.MigrationResult, error)) ([]MigrationResult, error) {
	p, err := newMigrationProvider(db, table)
	if err != nil {
		return nil, err
	}
	if err := checkNotForeign(ctx, db, table); err != nil {
		return nil, err
	}
	results, err := up(p)
	if db.driver.classify(err) == errorUndefinedSchema {
		t, _ := ParseTableName(table)
		return nil, fmt.Errorf("migrate outbox table %s: %s: %w", table, db.driver.migrations().missingSchema(t.schema), err)
	}
	if err != nil {
		return nil, fmt.Errorf("migrate outbox table %s: %w", table, err)
	}
	out := make([]MigrationResult, 0, len(results))
	for _, r := range results {
		out = append(out, MigrationResult{Version: r.Source.Version})
	}
	return out, nil
}

// SchemaVersions returns the schema version of table recorded in its
// migrations table and the newest version this build has. current <
// target means `bridge migrate` has migrations to apply.
func SchemaVersions(ctx context.Context, db *DB, table string) (current, target int64, err error) {
	p, err := newMigrationProvider(db, table)
	if err != nil {
		return 0, 0, err
	}
	current, target, err = p.GetVersions(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("read schema version of outbox table %s: %w", table, err)
	}
	return current, target, nil
}

func newMigrationProvider(db *DB, table string) (*goose.Provider, error) {
	t, err := ParseTableName(table)
	if err != nil {
		return nil, err
	}
	migrations, err := renderMigrations(db.driver, t)
	if err != nil {
		return nil, err
	}
	versions := t.String() + "_migrations"
	store, err := database.NewStore(db.driver.migrations().goose, versions)
	if err != nil {
		return nil, fmt.Errorf("migration store: %w", err)
	}
	return goose.NewProvider("", db.SQL, nil,
		goose.WithStore(migrationStore{Store: store, table: versions, driver: db.driver}),
		goose.WithDisableGlobalRegistry(true),
		goose.WithGoMigrations(migrations...),
	)
}

// migrationStore is goose's store of the version table, whose existence is
// checked by naming the table as every other statement does: unquoted, so
// the database resolves it. goose's own check compares the name as written
// with the catalog (pg_tables.tablename = 'Shop_Outbox_migrations'), which
// misses the table PostgreSQL created under the folded name
// shop_outbox_migrations: a second migrate tried to create it again.
type migrationStore struct {
	database.Store
	table  string
	driver driver
}

var _ database.StoreExtender = migrationStore{}

// TableExists implements database.StoreExtender.
func (s migrationStore) TableExists(ctx context.Context, db database.DBTxConn) (bool, error) {
	ok, err := relationExists(ctx, db, s.driver, s.table)
	if err != nil {
		return false, fmt.Errorf("look up migration version table %s: %w", s.table, err)
	}
	return ok, nil
}

// relationExists reports whether name (as every statement names it:
// unquoted, resolved by the database) is a table or view.
func relationExists(ctx context.Context, db database.DBTxConn, d driver, name string) (bool, error) {
	rows, err := db.QueryContext(ctx, "SELECT 1 FROM "+name+" WHERE 1 = 0")
	switch {
	case err == nil:
		return true, rows.Close()
	case d.classify(err) == errorUndefinedTable:
		return false, nil
	}
	return false, err
}

// ErrForeignTable is returned by Migrate for a table of the name given
// that bridge migrate did not make (no <table>_migrations beside it).
var ErrForeignTable = errors.New("a table of that name exists and was not made by bridge migrate")

// checkNotForeign refuses to migrate a table that exists without its
// version table: bridge migrate creates the outbox table itself, and on a
// foreign one goose created the version table, failed on CREATE TABLE
// ("partial migration error … relation already exists") and left the
// version table behind, marked dirty (a newcomer's trial).
func checkNotForeign(ctx context.Context, db *DB, table string) error {
	t, err := ParseTableName(table)
	if err != nil {
		return err
	}
	versions, err := relationExists(ctx, db.SQL, db.driver, t.String()+"_migrations")
	if err != nil || versions {
		return nil // an error here is goose's to report, on its own read
	}
	exists, err := relationExists(ctx, db.SQL, db.driver, t.String())
	if err != nil || !exists {
		return nil
	}
	return fmt.Errorf("migrate outbox table %s: %w (no %s_migrations beside it): bridge migrate creates the outbox table itself; give another --table, or rename or drop %s",
		table, ErrForeignTable, table, table)
}

// noTransaction is the first line of a migration that must run outside a
// transaction block (CREATE or DROP INDEX CONCURRENTLY on PostgreSQL): goose
// runs it on the database and records its version afterwards, and
// MigrationScript writes it without BEGIN and COMMIT.
const noTransaction = "-- bridge:no-transaction"

// renderMigrations turns the driver's embedded SQL files into goose
// migrations for table t, each run in one transaction unless it starts with
// noTransaction.
func renderMigrations(d driver, t tableName) ([]*goose.Migration, error) {
	rendered, err := renderSQL(d, t)
	if err != nil {
		return nil, err
	}
	out := make([]*goose.Migration, 0, len(rendered))
	for _, r := range rendered {
		stmt := r.sql
		up := &goose.GoFunc{RunTx: func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, stmt)
			return err
		}}
		if r.noTx {
			up = &goose.GoFunc{RunDB: func(ctx context.Context, db *sql.DB) error {
				_, err := db.ExecContext(ctx, stmt)
				return err
			}}
		}
		out = append(out, goose.NewGoMigration(r.version, up, nil))
	}
	return out, nil
}

// renderedMigration is one embedded migration's SQL for one table.
type renderedMigration struct {
	version int64
	file    string
	sql     string
	noTx    bool // the file starts with noTransaction
}

// renderSQL renders the driver's embedded migrations (migrations/<dialect>/)
// for table t, in version order. Files are named NNNNN_what.sql and see
// sqlData ({{.Table}}, {{.Name}}, {{.Index "suffix"}}), as the queries do.
func renderSQL(d driver, t tableName) ([]renderedMigration, error) {
	rendered, err := renderSQLDir("migrations/"+string(d.dialect()), d, t)
	if err != nil {
		return nil, err
	}
	out := make([]renderedMigration, 0, len(rendered))
	for _, r := range rendered {
		version, err := strconv.ParseInt(strings.SplitN(r.file, "_", 2)[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("embedded migration %s: name must start with a version number", r.file)
		}
		out = append(out, renderedMigration{version: version, file: r.file, sql: r.sql, noTx: strings.HasPrefix(r.sql, noTransaction)})
	}
	return out, nil
}
