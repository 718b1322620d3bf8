package producer

import (
	"context"
	"database/sql"
	"errors"

	"github.com/jackc/pgx/v5"
)

// sqlTx adapts a database/sql transaction, of any driver.
type sqlTx struct{ tx *sql.Tx }

func (t sqlTx) queryID(ctx context.Context, query string, args ...any) (int64, bool, error) {
	var id int64
	err := t.tx.QueryRowContext(ctx, query, args...).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	return id, err == nil, err
}

func (t sqlTx) exec(ctx context.Context, query string, args ...any) (int64, int64, error) {
	res, err := t.tx.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, 0, err
	}
	affected, err := res.RowsAffected()
	if err != nil {
		return 0, 0, err
	}
	id, err := res.LastInsertId()
	if err != nil {
		return 0, 0, err
	}
	return affected, id, nil
}

// pgxTx adapts a pgx transaction (PostgreSQL only).
type pgxTx struct{ tx pgx.Tx }

func (t pgxTx) queryID(ctx context.Context, query string, args ...any) (int64, bool, error) {
	var id int64
	err := t.tx.QueryRow(ctx, query, args...).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	return id, err == nil, err
}

// exec is not used with pgx: WritePgx accepts only the Postgres dialect,
// whose INSERT returns the id.
func (t pgxTx) exec(ctx context.Context, query string, args ...any) (int64, int64, error) {
	tag, err := t.tx.Exec(ctx, query, args...)
	if err != nil {
		return 0, 0, err
	}
	return tag.RowsAffected(), 0, nil
}
