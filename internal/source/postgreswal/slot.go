package postgreswal

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-bridge/bridge/internal/outbox"
)

// Plugin is the logical decoding output plugin of the slot: pgoutput,
// built into PostgreSQL (10+); the relay reads its protocol version 1 with
// the binary and messages options, which need PostgreSQL 14+.
const Plugin = "pgoutput"

// ErrWALLevel is returned (wrapped) when the server's wal_level is not
// logical: logical replication is off, and the source cannot start. It is
// a configuration error (exit 2).
var ErrWALLevel = errors.New("wal_level is not logical")

// ErrNoSlot is returned (wrapped) when the replication slot or the
// publication does not exist, or the slot was invalidated; the message
// says which and what to run.
var ErrNoSlot = errors.New("replication slot or publication missing")

// ErrSlotActive is returned (wrapped) by DropSlot when a relay holds the
// slot.
var ErrSlotActive = errors.New("replication slot is in use")

// Names are the publication and slot of one outbox table.
type Names struct {
	// Table is the outbox table as configured (optionally schema.table).
	Table string
	// Publication publishes the table's inserts.
	Publication string
	// Slot is the logical replication slot the relay reads.
	Slot string
}

// CheckWALLevel returns an error wrapping ErrWALLevel, naming the setting,
// its value and how to change it, unless the server's wal_level is
// logical.
func CheckWALLevel(ctx context.Context, db *sql.DB) error {
	var level string
	if err := db.QueryRowContext(ctx, "SHOW wal_level").Scan(&level); err != nil {
		return fmt.Errorf("read wal_level: %w", err)
	}
	if level == "logical" {
		return nil
	}
	return fmt.Errorf("%w: PostgreSQL setting wal_level is %q; source postgres-wal reads the write-ahead log through logical replication, which needs wal_level = logical: "+
		"run ALTER SYSTEM SET wal_level = logical and restart the server (managed services: set it in the parameter group or flags, "+
		"e.g. rds.logical_replication = 1 on Amazon RDS, cloudsql.logical_decoding = on on Cloud SQL), or use source: table",
		ErrWALLevel, level)
}

// Setup creates what the source reads, when missing: the publication of
// the table's inserts (CREATE PUBLICATION … FOR TABLE … WITH (publish =
// 'insert')), then the logical replication slot with the pgoutput plugin.
// The publication comes first: a slot decodes the log with the catalog of
// each change's time, and a publication created after the slot's start
// would be missing for the changes before it. It reports what it created.
// Safe to run again; a publication or slot that exists but does not fit
// (another table, another plugin or database, an invalidated slot) is an
// error saying what to do.
func Setup(ctx context.Context, db *sql.DB, n Names) (createdPublication, createdSlot bool, err error) {
	if err := CheckWALLevel(ctx, db); err != nil {
		return false, false, err
	}
	if createdPublication, err = setupPublication(ctx, db, n); err != nil {
		return false, false, err
	}
	createdSlot, err = setupSlot(ctx, db, n)
	return createdPublication, createdSlot, err
}

func setupPublication(ctx context.Context, db *sql.DB, n Names) (bool, error) {
	exists, inserts, err := publication(ctx, db, n)
	if err != nil {
		return false, err
	}
	if exists {
		if !inserts {
			return false, fmt.Errorf("%w: publication %s exists but does not publish the inserts of %s; drop it (DROP PUBLICATION %s) or choose another wal.publication",
				ErrNoSlot, n.Publication, n.Table, n.Publication)
		}
		return false, nil
	}
	// Names are validated (config: wal.publication, database.table), so
	// they go into the statement as they are.
	_, err = db.ExecContext(ctx, "CREATE PUBLICATION "+n.Publication+" FOR TABLE "+n.Table+" WITH (publish = 'insert')")
	if err != nil {
		return false, fmt.Errorf("create publication %s for %s: %w", n.Publication, n.Table, err)
	}
	return true, nil
}

// publication reports whether the publication exists and whether it
// publishes the inserts of the table (of some table, when n.Table is "":
// a group of tables whose patterns match none yet).
func publication(ctx context.Context, db *sql.DB, n Names) (exists, inserts bool, err error) {
	p, err := readPublication(ctx, db, n)
	return p.exists, p.exists && p.insert && (p.hasTable || n.Table == ""), err
}

// publicationState is the publication of the table as the catalog has it.
type publicationState struct {
	exists   bool
	hasTable bool // the table is among its tables (pg_publication_tables: FOR ALL TABLES included)
	// What it publishes (pg_publication.pub*).
	insert, update, delete, truncate bool
	// partial says how the publication filters the table's rows or
	// columns (PostgreSQL 15: pg_publication_tables.rowfilter, attnames);
	// "" when it publishes them all.
	partial string
}

// readPublication reads the publication from pg_publication and
// pg_publication_tables; a publication that does not exist is the zero
// state.
func readPublication(ctx context.Context, db *sql.DB, n Names) (publicationState, error) {
	p, err := readPublicationOf(ctx, db, n.Publication, n.Table)
	if err != nil {
		return publicationState{}, err
	}
	schema, table := splitTable(n.Table)
	q := qualifiedName{schema: p.current, name: table}
	if schema != nil {
		q.schema = schema.(string)
	}
	return p.of(q), nil
}

// publicationTables is a publication as the catalog has it, with the
// tables it publishes: one read serves every table of a stream
// (slotStream.publication).
type publicationTables struct {
	exists bool
	// What it publishes (pg_publication.pub*).
	insert, update, delete, truncate bool
	// current is the session's current_schema(), the schema of an
	// unqualified table name.
	current string
	// tables are the tables it publishes (pg_publication_tables: FOR ALL
	// TABLES and FOR TABLES IN SCHEMA included), each with how it filters
	// the table's rows or columns ("" when it publishes them all; see
	// publicationState.partial).
	tables map[qualifiedName]string
}

// of is the publication's state for table q.
func (p publicationTables) of(q qualifiedName) publicationState {
	if !p.exists {
		return publicationState{}
	}
	partial, has := p.tables[q]
	return publicationState{exists: true, hasTable: has, insert: p.insert, update: p.update, delete: p.delete, truncate: p.truncate, partial: partial}
}

// readPublicationTables reads publication pub and its tables in one
// statement. A row filter drops rows from the stream, a column list sends
// rows without the columns the relay reads (PostgreSQL 15 and later:
// pg_publication_tables.rowfilter and attnames; before, the statement
// without them); either way the rows reach the relay only through the
// sweep, late and out of commit order, or not whole.
func readPublicationTables(ctx context.Context, db *sql.DB, pub string) (publicationTables, error) {
	return readPublicationOf(ctx, db, pub, "")
}

// readPublicationOf is readPublicationTables over the one table named
// (configured spelling; "": every table): bridge migrate checks each
// table of a pattern in turn, and reading every table of the publication
// for each would cost it the square of their number.
func readPublicationOf(ctx context.Context, db *sql.DB, pub, only string) (publicationTables, error) {
	var schema, table any // nil: every table
	if only != "" {
		schema, table = splitTable(only)
	}
	const head = `SELECT p.pubinsert, p.pubupdate, p.pubdelete, p.pubtruncate, coalesce(current_schema(), ''), t.schemaname, t.tablename`
	const from = `
FROM pg_publication p LEFT JOIN pg_publication_tables t ON t.pubname = p.pubname
	AND ($3::text IS NULL OR (t.schemaname = coalesce($2::text, current_schema()) AND t.tablename = $3::text))
WHERE p.pubname = $1`
	// (A publication without a table has one row, its table NULL, which
	// format's %I refuses.)
	filters := `, t.rowfilter, CASE WHEN t.tablename IS NULL THEN 0 ELSE (SELECT count(*) FROM pg_attribute a
	WHERE a.attrelid = to_regclass(format('%I.%I', t.schemaname, t.tablename))
	AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = '') - coalesce(array_length(t.attnames, 1), 0) END`
	rows, err := db.QueryContext(ctx, head+filters+from, pub, schema, table)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42703" {
		// undefined_column: before PostgreSQL 15, no column lists or
		// row filters.
		filters = `, NULL::text, 0`
		rows, err = db.QueryContext(ctx, head+filters+from, pub, schema, table)
	}
	if err != nil {
		return publicationTables{}, fmt.Errorf("look up publication %s: %w", pub, err)
	}
	defer rows.Close()
	p := publicationTables{tables: map[qualifiedName]string{}}
	for rows.Next() {
		var schema, table, filter sql.NullString
		var missing sql.NullInt64
		if err := rows.Scan(&p.insert, &p.update, &p.delete, &p.truncate, &p.current, &schema, &table, &filter, &missing); err != nil {
			return publicationTables{}, fmt.Errorf("look up publication %s: %w", pub, err)
		}
		p.exists = true
		if schema.Valid {
			p.tables[qualifiedName{schema: schema.String, name: table.String}] = partialOf(filter, missing.Int64)
		}
	}
	if err := rows.Err(); err != nil {
		return publicationTables{}, fmt.Errorf("look up publication %s: %w", pub, err)
	}
	return p, nil
}

// partialOf says how a publication filters a table's rows (filter, its
// WHERE clause) or columns (missing of them left out); "" when it does
// not.
func partialOf(filter sql.NullString, missing int64) string {
	var what []string
	if missing > 0 {
		what = append(what, fmt.Sprintf("a column list without %d of the table's columns", missing))
	}
	if filter.Valid {
		what = append(what, "a row filter WHERE "+filter.String)
	}
	return strings.Join(what, " and ")
}

// qualifiedName is a table's schema and name as the catalog spells them.
type qualifiedName struct{ schema, name string }

// resolveTable looks the configured table up as PostgreSQL would (unquoted
// names fold to lower case; an unqualified one follows the search path)
// and returns its schema and name. Errors: outbox.ErrNoTable.
func resolveTable(ctx context.Context, db *sql.DB, table string) (qualifiedName, error) {
	var q qualifiedName
	err := db.QueryRowContext(ctx, `SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid = to_regclass($1)`, table).Scan(&q.schema, &q.name)
	if errors.Is(err, sql.ErrNoRows) {
		return q, fmt.Errorf("%w: table %s: create it with `bridge migrate`", outbox.ErrNoTable, table)
	}
	if err != nil {
		return q, fmt.Errorf("look up table %s: %w", table, err)
	}
	return q, nil
}

// splitTable returns the schema (nil when unqualified) and the table of a
// configured name, in PostgreSQL's folding of unquoted names.
func splitTable(name string) (schema any, table string) {
	name = strings.ToLower(name)
	if s, t, ok := strings.Cut(name, "."); ok {
		return s, t
	}
	return nil, name
}

func setupSlot(ctx context.Context, db *sql.DB, n Names) (bool, error) {
	info, err := SlotStatus(ctx, db, n.Slot)
	switch {
	case errors.Is(err, ErrNoSlot):
		if _, err := db.ExecContext(ctx, "SELECT pg_create_logical_replication_slot($1, $2)", n.Slot, Plugin); err != nil {
			return false, fmt.Errorf("create replication slot %s: %w", n.Slot, err)
		}
		return true, nil
	case err != nil:
		return false, err
	}
	return false, info.usable(n)
}

// SlotInfo describes a replication slot, from pg_replication_slots.
type SlotInfo struct {
	Name, Plugin, Database string
	// Active says whether a connection streams from the slot; ActivePID is
	// its server process.
	Active    bool
	ActivePID int
	// WALStatus is reserved, extended, unreserved or lost (PostgreSQL 13+):
	// lost means max_slot_wal_keep_size removed WAL the slot needed.
	WALStatus string
	// SafeWALSize is how many more bytes of WAL can be written before the
	// slot is in danger of being lost, or -1 without max_slot_wal_keep_size.
	SafeWALSize int64
	// RestartLSN and ConfirmedLSN are the slot's positions, as text.
	RestartLSN, ConfirmedLSN string
	// RetainedBytes is the WAL the server keeps for the slot: from its
	// restart position to the current one.
	RetainedBytes int64
	// UnconfirmedBytes is the WAL written since the slot's confirmed
	// position: what the relay has yet to read, publish and confirm.
	UnconfirmedBytes int64
	// CurrentDatabase is the database of the connection that asked.
	CurrentDatabase string
}

// SlotStatus reads the slot. Errors: ErrNoSlot (wrapped) when there is
// none.
func SlotStatus(ctx context.Context, db *sql.DB, slot string) (SlotInfo, error) {
	info := SlotInfo{Name: slot}
	var pid sql.NullInt64
	var walStatus, restart, confirmed, database sql.NullString
	var safe, retained, unconfirmed sql.NullInt64
	err := db.QueryRowContext(ctx, `WITH cur(lsn) AS (
	SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END)
SELECT s.plugin, s.database, s.active, s.active_pid, s.wal_status, s.safe_wal_size,
	s.restart_lsn::text, s.confirmed_flush_lsn::text,
	pg_wal_lsn_diff(cur.lsn, s.restart_lsn)::bigint, pg_wal_lsn_diff(cur.lsn, s.confirmed_flush_lsn)::bigint,
	current_database()
FROM pg_replication_slots s, cur WHERE s.slot_name = $1`, slot).Scan(&info.Plugin, &database, &info.Active, &pid, &walStatus, &safe,
		&restart, &confirmed, &retained, &unconfirmed, &info.CurrentDatabase)
	if errors.Is(err, sql.ErrNoRows) {
		return info, fmt.Errorf("%w: no replication slot %s", ErrNoSlot, slot)
	}
	if err != nil {
		return info, fmt.Errorf("read replication slot %s: %w", slot, err)
	}
	info.Database, info.ActivePID, info.WALStatus = database.String, int(pid.Int64), walStatus.String
	info.RestartLSN, info.ConfirmedLSN = restart.String, confirmed.String
	info.SafeWALSize, info.RetainedBytes, info.UnconfirmedBytes = -1, max(retained.Int64, 0), max(unconfirmed.Int64, 0)
	if safe.Valid {
		info.SafeWALSize = safe.Int64
	}
	return info, nil
}

// usable returns nil when the relay can stream from the slot.
func (info SlotInfo) usable(n Names) error {
	switch {
	case info.Plugin != Plugin:
		return fmt.Errorf("%w: replication slot %s uses the plugin %q, not %s; choose another wal.slot, or drop it (bridge slot drop) if nothing else uses it",
			ErrNoSlot, info.Name, info.Plugin, Plugin)
	case info.Database != info.CurrentDatabase:
		return fmt.Errorf("%w: replication slot %s belongs to database %s, not %s; choose another wal.slot (a slot name is unique in the server)",
			ErrNoSlot, info.Name, info.Database, info.CurrentDatabase)
	case info.WALStatus == "lost":
		return fmt.Errorf("%w: replication slot %s was invalidated (wal_status lost: max_slot_wal_keep_size removed WAL it needed); "+
			"drop it with `bridge slot drop` and create it again with `bridge migrate`: the relay then publishes the rows still pending (the sweep)",
			ErrNoSlot, info.Name)
	}
	return nil
}

// Check returns nil when the publication and the slot exist and fit the
// table: what `bridge run` needs. Errors: ErrWALLevel; ErrNoSlot naming
// what is missing and saying to run `bridge migrate`.
func Check(ctx context.Context, db *outbox.DB, n Names) error {
	if err := CheckWALLevel(ctx, db.SQL); err != nil {
		return err
	}
	exists, inserts, err := publication(ctx, db.SQL, n)
	if err != nil {
		return err
	}
	if !exists || !inserts {
		return fmt.Errorf("%w: publication %s of the inserts of %s does not exist in %s; create it with `bridge migrate` (same database.url, database.table and wal.*)",
			ErrNoSlot, n.Publication, n.Table, db.Redacted)
	}
	info, err := SlotStatus(ctx, db.SQL, n.Slot)
	if errors.Is(err, ErrNoSlot) {
		return fmt.Errorf("%w: replication slot %s does not exist in %s (after a failover to a server without it, or a drop); create it with `bridge migrate`: the rows still pending are then published by the sweep",
			ErrNoSlot, n.Slot, db.Redacted)
	}
	if err != nil {
		return err
	}
	return info.usable(n)
}

// DropSlot drops the replication slot, releasing the WAL it retains. The
// publication stays (it costs nothing). Errors: ErrNoSlot when there is no
// such slot; ErrSlotActive while a relay streams from it.
func DropSlot(ctx context.Context, db *sql.DB, slot string) error {
	_, err := db.ExecContext(ctx, "SELECT pg_drop_replication_slot($1)", slot)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "42704": // undefined_object
			return fmt.Errorf("%w: no replication slot %s", ErrNoSlot, slot)
		case "55006": // object_in_use
			return fmt.Errorf("%w: replication slot %s is active (%s): stop the relay that streams from it first", ErrSlotActive, slot, pgErr.Message)
		}
	}
	if err != nil {
		return fmt.Errorf("drop replication slot %s: %w", slot, err)
	}
	return nil
}
