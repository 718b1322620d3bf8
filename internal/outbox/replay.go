package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"time"
)

// ReplayRow is a relayed (done) row as bridge replay reads it: the row and
// where the relay stored its message.
type ReplayRow struct {
	Row
	// Stream and StreamSeq are the row's stream and stream_seq: where its
	// PubAck said the message was stored ("" and 0 when not recorded).
	Stream    string
	StreamSeq uint64
}

// ReplayParams select the relayed rows of one read of bridge replay.
type ReplayParams struct {
	// AfterID: rows with a larger id. ToID: rows with an id not above it
	// (0: no bound).
	AfterID, ToID int64
	// Since and Until bound created_at: Since <= created_at < Until (zero:
	// no bound). Compared at microseconds on PostgreSQL and MySQL,
	// milliseconds on SQLite (the stored precision).
	Since, Until time.Time
	// OrderingKey, when Valid, selects the rows of that ordering key.
	OrderingKey sql.NullString
	// Stream, when not empty, selects the rows relayed to that stream.
	Stream string
	// Limit is the most rows read; MaxBytes the most payload and header
	// bytes (Row.size) after the first row. Both must be positive.
	Limit    int
	MaxBytes int64
}

// replayTime is how a time bound travels to every dialect's replay_read.sql:
// RFC 3339 text in UTC with microseconds, which each converts.
func replayTime(t time.Time, unset time.Time) string {
	if t.IsZero() {
		t = unset
	}
	return t.UTC().Format("2006-01-02T15:04:05.000000Z")
}

var (
	replayMinTime = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)
	replayMaxTime = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)
)

// replayExecutor is the part of executor that bridge replay uses; every
// driver runs it the same way (replayReaders, embedded in readers).
type replayExecutor interface {
	ReplayRead(ctx context.Context, p *ReplayParams) ([]ReplayRow, error)
	ReplayRefilled(ctx context.Context, id int64, stream string, oldSeq, newSeq uint64) (bool, error)
	ReplayBounds(ctx context.Context, p *ReplayParams) (int64, int64, error)
	RelayedStreams(ctx context.Context) ([]RelayedStream, error)
	RelayedOutside(ctx context.Context, stream string, first, last uint64) (int64, error)
	RelayedSample(ctx context.Context, stream string, first, last uint64) (Row, uint64, bool, error)
}

// replayReaders runs replay_read.sql and replay_refilled.sql of the
// driver's queries/<dialect>/.
type replayReaders struct {
	replaySQL                                 *sql.DB
	replayRead, replayRefill, replayBounds    string
	relayedStreams, relayedLost, relayedFirst string
}

func takeReplayReaders(db *sql.DB, f *queryFiles) replayReaders {
	return replayReaders{replaySQL: db, replayRead: f.take("replay_read"), replayRefill: f.take("replay_refilled"),
		replayBounds:   f.take("replay_bounds"),
		relayedStreams: f.take("replay_streams"), relayedLost: f.take("replay_stream_lost"), relayedFirst: f.take("replay_stream_sample")}
}

// RelayedStreams runs replay_streams.sql.
func (r replayReaders) RelayedStreams(ctx context.Context) ([]RelayedStream, error) {
	rows, err := r.replaySQL.QueryContext(ctx, r.relayedStreams)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []RelayedStream
	for rows.Next() {
		var x RelayedStream
		var first, last int64
		if err := rows.Scan(&x.Stream, &x.Rows, &first, &last); err != nil {
			return nil, fmt.Errorf("scan: %w", err)
		}
		x.FirstSeq, x.LastSeq = uint64(max(first, 0)), uint64(max(last, 0))
		out = append(out, x)
	}
	return out, rows.Err()
}

// RelayedOutside runs replay_stream_lost.sql.
func (r replayReaders) RelayedOutside(ctx context.Context, stream string, first, last uint64) (int64, error) {
	var n int64
	err := r.replaySQL.QueryRowContext(ctx, r.relayedLost, stream, int64(first), int64(last)).Scan(&n)
	return n, err
}

// RelayedSample runs replay_stream_sample.sql: the row's id and
// idempotency key, and its stream_seq; false when no row is in range.
func (r replayReaders) RelayedSample(ctx context.Context, stream string, first, last uint64) (Row, uint64, bool, error) {
	var x Row
	var seq int64
	err := r.replaySQL.QueryRowContext(ctx, r.relayedFirst, stream, int64(first), int64(last)).Scan(&x.ID, &x.IdempotencyKey, &seq)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return Row{}, 0, false, nil
	case err != nil:
		return Row{}, 0, false, err
	}
	return x, uint64(max(seq, 0)), true, nil
}

// replayArgs are the parameters replay_read.sql and replay_bounds.sql
// share, in their order.
func replayArgs(p *ReplayParams) []any {
	toID := p.ToID
	if toID <= 0 {
		toID = math.MaxInt64
	}
	var key, stream any
	if p.OrderingKey.Valid {
		key = p.OrderingKey.String
	}
	if p.Stream != "" {
		stream = p.Stream
	}
	return []any{p.AfterID, toID, replayTime(p.Since, replayMinTime), replayTime(p.Until, replayMaxTime), key, key, stream, stream}
}

// ReplayBounds runs replay_bounds.sql: the rows selected and the last id.
func (r replayReaders) ReplayBounds(ctx context.Context, p *ReplayParams) (int64, int64, error) {
	var n, last int64
	err := r.replaySQL.QueryRowContext(ctx, r.replayBounds, replayArgs(p)...).Scan(&n, &last)
	return n, last, err
}

// ReplayRead reads rows in id order until p.Limit rows or p.MaxBytes
// bytes after the first: the rows are streamed, so that no more than the
// budget is held (the database may have sent a little more, which Close
// discards).
func (r replayReaders) ReplayRead(ctx context.Context, p *ReplayParams) ([]ReplayRow, error) {
	rows, err := r.replaySQL.QueryContext(ctx, r.replayRead, append(replayArgs(p), p.Limit)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []ReplayRow
	var bytes int64
	for rows.Next() {
		var x ReplayRow
		var headers sql.NullString
		var seq int64
		if err := rows.Scan(&x.ID, &x.IdempotencyKey, &x.Subject, &x.Payload, &headers, &x.OrderingKey,
			dbTime{&x.CreatedAt}, &x.Stream, &seq); err != nil {
			return nil, fmt.Errorf("scan: %w", err)
		}
		if x.Payload == nil {
			x.Payload = []byte{}
		}
		x.Headers, x.PayloadSize, x.StreamSeq = []byte(headers.String), int64(len(x.Payload)), uint64(max(seq, 0))
		out = append(out, x)
		if bytes += x.Size(); bytes >= p.MaxBytes {
			break
		}
	}
	return out, rows.Err()
}

// ReplayRefilled records newSeq as the stream_seq of done row id while it
// still says stream and oldSeq; false when it did not.
func (r replayReaders) ReplayRefilled(ctx context.Context, id int64, stream string, oldSeq, newSeq uint64) (bool, error) {
	n, err := execCount(ctx, r.replaySQL, r.replayRefill, int64(newSeq), id, stream, int64(oldSeq))
	return n > 0, err
}

// ReplayRead reads relayed (done) rows for bridge replay (see
// ReplayParams) in id order, without locking them and without changing
// them: the live relay is neither blocked nor slowed by more than the
// read.
func (s *Store) ReplayRead(ctx context.Context, p ReplayParams) ([]ReplayRow, error) {
	if p.Limit <= 0 || p.MaxBytes <= 0 {
		return nil, fmt.Errorf("read relayed rows: limit %d and max bytes %d must be positive", p.Limit, p.MaxBytes)
	}
	rows, err := s.exec.ReplayRead(ctx, &p)
	if err != nil {
		return nil, fmt.Errorf("read relayed rows after id %d: %w", p.AfterID, err)
	}
	return rows, nil
}

// ReplayBounds counts the relayed rows p selects (Limit and MaxBytes are
// not used) and returns the largest id among them (0: none): what a replay
// has ahead of it, for its progress and ETA. The --subject filter of a
// replay is applied in Go, so with it these are upper bounds.
func (s *Store) ReplayBounds(ctx context.Context, p ReplayParams) (rows, lastID int64, err error) {
	rows, lastID, err = s.exec.ReplayBounds(ctx, &p)
	if err != nil {
		return 0, 0, fmt.Errorf("count relayed rows after id %d: %w", p.AfterID, err)
	}
	return rows, lastID, nil
}

// ReplayRefilled records that the message of relayed row id, which stream
// no longer held at oldSeq, is stored again at newSeq: only stream_seq
// changes, and only while the row is done with that stream and oldSeq.
// It reports whether the row changed.
func (s *Store) ReplayRefilled(ctx context.Context, id int64, stream string, oldSeq, newSeq uint64) (bool, error) {
	ok, err := s.exec.ReplayRefilled(ctx, id, stream, oldSeq, newSeq)
	if err != nil {
		return false, fmt.Errorf("record the refilled sequence of row %d: %w", id, err)
	}
	return ok, nil
}

// Now reads the database clock (UTC), as the statements that compare
// created_at see it.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	c, err := s.exec.CountByStatus(ctx)
	if err != nil {
		return time.Time{}, fmt.Errorf("read the database clock: %w", err)
	}
	return c.Now, nil
}

// RelayedStream is a stream recorded on relayed (done) rows: how many rows
// record it, and their lowest and highest stream_seq.
type RelayedStream struct {
	Stream            string
	Rows              int64
	FirstSeq, LastSeq uint64
}

// RelayedStreams returns the streams recorded on relayed rows, by name.
// It reads every done row (one aggregate): for bridge status, not a loop.
func (s *Store) RelayedStreams(ctx context.Context) ([]RelayedStream, error) {
	out, err := s.exec.RelayedStreams(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the streams of relayed rows: %w", err)
	}
	return out, nil
}

// RelayedOutside counts the relayed rows of stream whose stream_seq is
// below first or above last: messages a stream holding first..last no
// longer has.
func (s *Store) RelayedOutside(ctx context.Context, stream string, first, last uint64) (int64, error) {
	n, err := s.exec.RelayedOutside(ctx, stream, first, last)
	if err != nil {
		return 0, fmt.Errorf("count the relayed rows of stream %s outside sequences %d-%d: %w", stream, first, last, err)
	}
	return n, nil
}

// RelayedSample returns the relayed row of stream with the smallest id
// whose stream_seq is in first..last (its ID and IdempotencyKey), and that
// stream_seq; false when there is none.
func (s *Store) RelayedSample(ctx context.Context, stream string, first, last uint64) (Row, uint64, bool, error) {
	r, seq, ok, err := s.exec.RelayedSample(ctx, stream, first, last)
	if err != nil {
		return Row{}, 0, false, fmt.Errorf("read a relayed row of stream %s: %w", stream, err)
	}
	return r, seq, ok, nil
}
