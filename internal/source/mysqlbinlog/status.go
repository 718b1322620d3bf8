package mysqlbinlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/outbox-bridge/bridge/internal/outbox"
)

// Info is what bridge status says of a table's binary log.
type Info struct {
	// Stored is the stored position (the rows before it are published and
	// marked) and StoredAt when it was written (database clock, UTC);
	// HasStored is false before the first bridge migrate or run.
	Stored    Position
	StoredAt  time.Time
	HasStored bool
	// Server is the end of the server's binary log now.
	Server Position
	// Reader describes the session holding the table's lock (a relay
	// reading the log), or "" when none does.
	Reader string
	// OldestFile is the oldest binary log file the server keeps; Kept
	// reports that the stored position's file is still there (false: the
	// position was purged, the next run recovers with a sweep).
	OldestFile string
	Kept       bool
}

// Status reads the stored position, the server's, the lock's holder and
// the oldest binary log file of table. Errors: ErrSettings when the
// server's binary log is off; the database's.
func Status(ctx context.Context, db *outbox.DB, table string) (Info, error) {
	var info Info
	store, err := outbox.NewStore(db, table)
	if err != nil {
		return info, err
	}
	q, ok := store.BinlogStatements()
	if !ok {
		return info, fmt.Errorf("%w: not a MySQL or MariaDB database (%s)", ErrSettings, db.Dialect())
	}
	srv, err := CheckServer(ctx, db.SQL)
	if err != nil && !errors.Is(err, ErrSettings) {
		return info, err
	}
	schema, name, err := resolveTable(ctx, db.SQL, table)
	if err != nil {
		return info, err
	}
	var pos int64
	var at string
	switch err := db.SQL.QueryRowContext(ctx, q.PositionRead).Scan(&info.Stored.GTID, &info.Stored.File, &pos, &at); {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return info, fmt.Errorf("read the binary log position of %s: %w", table, err)
	default:
		info.HasStored, info.Stored.Pos = true, uint32(pos)
		info.StoredAt, _ = time.Parse(dbTimeLayout, at)
	}
	if info.Server, err = serverPosition(ctx, db.SQL, srv); err != nil {
		return info, err
	}
	info.Reader = lockHolder(ctx, db.SQL, lockName(schema, name))
	rows, err := db.SQL.QueryContext(ctx, "SHOW BINARY LOGS")
	if err != nil {
		return info, fmt.Errorf("list the server's binary log files: %w", err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	for rows.Next() {
		vals := make([]any, len(cols))
		for i := range vals {
			vals[i] = new(sql.RawBytes)
		}
		if err := rows.Scan(vals...); err != nil {
			return info, err
		}
		file := string(*vals[0].(*sql.RawBytes))
		if info.OldestFile == "" {
			info.OldestFile = file
		}
		if file == info.Stored.File {
			info.Kept = true
		}
	}
	return info, rows.Err()
}
