package postgreswal

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/outbox-bridge/bridge/internal/source"
)

// readTimeout bounds one wait for a message from the server, so that the
// reader sends its status updates and notices a stop.
const readTimeout = 100 * time.Millisecond

// The reader hands events to the pipeline in batches of up to
// eventBatchMax, and at most eventQueue batches wait: one channel
// operation per batch instead of per row. A batch goes as soon as the
// reader has nothing more buffered to read, so that it never waits for
// the server with events in hand (or after readTimeout, while the rest of
// a long message is on its way).
const (
	eventBatchMax = 512
	eventQueue    = 8
)

// errStopped ends a session because the subscriber stops.
var errStopped = errors.New("stopped")

// streamLoop reads the slot until the subscriber stops: one session per
// replication connection, started again after an interruption, with a
// backoff up to 5 s. It never gives up: while another process holds the
// slot this relay is a standby, retrying every 5 s and naming the holder
// (readiness, the stall watch); while the slot or the
// publication is missing or the slot is invalidated (a failover to a
// server without it, a drop, max_slot_wal_keep_size), which only an
// operator can fix (`bridge migrate`), it logs the fix at ERROR once,
// fails readiness with it, and retries every 5 s.
func (s *Subscriber) streamLoop() {
	backoff := 100 * time.Millisecond
	sessions := 0
	var logged string // the last waiting state logged
	for {
		started, err := s.session(sessions > 0)
		if started {
			sessions++
			backoff, logged = 100*time.Millisecond, ""
		}
		if errors.Is(err, errStopped) || s.stopping() {
			return
		}
		var pgErr *pgconn.PgError
		standby := errors.As(err, &pgErr) && pgErr.Code == "55006"
		operator := needsOperator(err)
		if isPublicationMissing(err) {
			// Until the server decodes a transaction of the slot again:
			// the publication's catalog row may exist again meanwhile.
			fault := publicationDropped(s.cfg.Names)
			s.slotFault.Store(&fault)
			err = fmt.Errorf("%w: %w; %s", ErrNoSlot, err, fault)
		} else if operator {
			err = fmt.Errorf("%w: %w; create the slot and the publication with `bridge migrate` (after `bridge slot drop` for an invalidated slot): the relay then starts on its own and publishes the rows still pending (the sweep)",
				ErrNoSlot, err)
		}
		st := &streamState{standby: standby, err: err}
		if standby {
			st.holder = s.describeHolder()
		}
		s.readTableLag()
		s.state.Store(st)
		wait := backoff
		switch {
		case standby:
			wait = 5 * time.Second
			if logged != "standby" {
				s.logger.Info("replication slot in use by another process; waiting for it (standby)", slog.String("reason", pgErr.Message),
					slog.String("holder", st.holder))
			}
			logged = "standby"
		case operator:
			wait = 5 * time.Second
			if logged != err.Error() {
				s.logger.Error("replication stream cannot start; waiting for the slot", slog.Any("error", err), slog.Duration("retry_every", wait))
			}
			logged = err.Error()
		default:
			logged = ""
			s.logger.Warn("replication stream interrupted; starting it again", slog.Any("error", err), slog.Duration("retry_in", wait))
			backoff = min(backoff*2, 5*time.Second)
		}
		select {
		case <-time.After(wait):
		case <-s.stopReader:
			return
		}
	}
}

func (s *Subscriber) stopping() bool { return source.Closed(s.stopReader) }

// session streams from one replication connection until it fails or the
// subscriber stops; started says whether replication started. After the
// first session, the pipeline is told that the server sends again
// everything after its confirmed position.
func (s *Subscriber) session(again bool) (started bool, err error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-s.stopReader:
			cancel()
		case <-ctx.Done():
		}
	}()
	conn, err := pgconn.ConnectConfig(ctx, s.repl)
	if err != nil {
		return false, fmt.Errorf("replication connection: %w", err)
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		conn.Close(closeCtx)
	}()
	statusEvery := s.statusInterval(ctx, conn)
	start := pglogrepl.LSN(s.confirmed.Load())
	err = pglogrepl.StartReplication(ctx, conn, s.cfg.Slot, start, pglogrepl.StartReplicationOptions{PluginArgs: []string{
		"proto_version '1'",
		"publication_names '" + s.cfg.Publication + "'",
		"binary 'true'",   // PostgreSQL 14+: bytea as bytes, not hex text
		"messages 'true'", // PostgreSQL 14+: the sweep's watermarks
	}})
	if err != nil {
		return false, fmt.Errorf("start replication from slot %s at %s: %w", s.cfg.Slot, start, err)
	}
	// No earlier holder of the slot can have read past the server's WAL
	// position now: the rows committed before it are checked (check.go).
	s.checkBelow.Store(s.walPosition(ctx))
	r := &reader{s: s, conn: conn, relations: map[uint32]*relation{}, types: pgtype.NewMap(), statusEvery: statusEvery}
	defer r.discard()
	if again {
		r.push(event{kind: evRestart})
	}
	s.state.Store(&streamState{streaming: true})
	s.logger.Info("streaming from replication slot", slog.String("from", start.String()), slog.String("publication", s.cfg.Publication))
	err = r.run(ctx)
	if s.stopping() {
		r.sendStatus() // the final position, once the pipeline is done
		return true, errStopped
	}
	return true, err
}

// statusInterval returns the longest wait between two standby status
// updates on conn: Config.StatusInterval, or a third of the session's
// wal_sender_timeout (SHOW on the replication connection: the role, the
// database or the connection's options may set it) when that is shorter.
// PostgreSQL ends a walsender that heard nothing for wal_sender_timeout
// (0 disables it: WalSndCheckTimeOut, src/backend/replication/walsender.c);
// the reader sends a status update at least this often, also while the
// pipeline does not take its events. When the setting cannot be read, a
// third of PostgreSQL's least useful value, 1 s (the reader's own wait
// for a message is readTimeout).
func (s *Subscriber) statusInterval(ctx context.Context, conn *pgconn.PgConn) time.Duration {
	every := s.cfg.StatusInterval
	res, err := conn.Exec(ctx, "SHOW wal_sender_timeout").ReadAll()
	var text string
	if err == nil && len(res) == 1 && len(res[0].Rows) == 1 && len(res[0].Rows[0]) == 1 {
		text = string(res[0].Rows[0][0])
	}
	timeout, perr := parseGUCDuration(text)
	switch {
	case err != nil || perr != nil:
		s.logger.Warn("cannot read wal_sender_timeout; sending standby status every second", slog.String("value", text), slog.Any("error", cmp.Or(err, perr)))
		return min(every, time.Second)
	case timeout > 0:
		every = min(every, timeout/3)
	}
	return max(every, statusMinInterval)
}

// parseGUCDuration reads a PostgreSQL time setting as SHOW prints it: an
// integer and a unit (us, ms, s, min, h, d), milliseconds without one.
func parseGUCDuration(text string) (time.Duration, error) {
	i := strings.IndexFunc(text, func(r rune) bool { return r < '0' || r > '9' })
	if i == 0 || text == "" {
		return 0, fmt.Errorf("time setting %q: not an integer and a unit", text)
	}
	if i < 0 {
		i = len(text)
	}
	n, err := strconv.ParseInt(text[:i], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("time setting %q: %w", text, err)
	}
	unit := map[string]time.Duration{"": time.Millisecond, "us": time.Microsecond, "ms": time.Millisecond, "s": time.Second,
		"min": time.Minute, "h": time.Hour, "d": 24 * time.Hour}
	u, ok := unit[strings.TrimSpace(text[i:])]
	if !ok {
		return 0, fmt.Errorf("time setting %q: unit not one of us, ms, s, min, h, d", text)
	}
	return time.Duration(n) * u, nil
}

// walPosition returns the server's current WAL position
// (pg_current_wal_lsn()); when it cannot be read, the largest position:
// every row of the session is checked.
func (s *Subscriber) walPosition(ctx context.Context) uint64 {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var text string
	if err := s.db.SQL.QueryRowContext(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&text); err != nil {
		s.logger.Warn("cannot read the server's WAL position; checking every row of this session against the table", slog.Any("error", err))
		return math.MaxUint64
	}
	lsn, err := pglogrepl.ParseLSN(text)
	if err != nil {
		return math.MaxUint64
	}
	return uint64(lsn)
}

// reader decodes one session's messages into events.
type reader struct {
	s         *Subscriber
	conn      *pgconn.PgConn
	relations map[uint32]*relation
	types     *pgtype.Map
	cols      []tupleColumn // scratch of parseInsert
	inTx      bool
	batch     []event // events not yet handed to the pipeline

	deadline       time.Time
	statusEvery    time.Duration // the longest wait between two status updates (statusInterval)
	lastStatus     time.Time
	lastSent       uint64
	replyRequested bool
}

func (r *reader) run(ctx context.Context) error {
	for {
		if err := r.maybeSendStatus(); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return errStopped
		}
		if r.conn.Frontend().ReadBufferLen() == 0 || len(r.batch) >= eventBatchMax {
			if err := r.flush(ctx); err != nil {
				return err
			}
		}
		if now := time.Now(); r.deadline.Sub(now) < readTimeout/2 {
			r.deadline = now.Add(readTimeout)
			if err := r.conn.Conn().SetReadDeadline(r.deadline); err != nil {
				return err
			}
		}
		raw, err := r.conn.ReceiveMessage(context.Background())
		if err != nil {
			if pgconn.Timeout(err) {
				// The rest of a long message is on its way: the
				// events before it do not wait for it.
				if err := r.flush(ctx); err != nil {
					return err
				}
				continue
			}
			return fmt.Errorf("receive from replication slot: %w", err)
		}
		switch m := raw.(type) {
		case *pgproto3.CopyData:
			if err := r.copyData(ctx, m.Data); err != nil {
				return err
			}
		case *pgproto3.ErrorResponse:
			return pgconn.ErrorResponseToPgError(m)
		case *pgproto3.CopyDone:
			return errors.New("the server ended the replication stream")
		}
	}
}

func (r *reader) copyData(ctx context.Context, data []byte) error {
	if len(data) == 0 {
		return nil
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		k, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return fmt.Errorf("parse keepalive: %w", err)
		}
		r.s.clockOffset.Store(int64(time.Until(k.ServerTime)))
		r.replyRequested = r.replyRequested || k.ReplyRequested
		// Between transactions everything before ServerWALEnd was sent.
		// Inside one (a keepalive can come in the middle of a large
		// transaction's changes), the transaction's commit may lie before
		// it while its rest is still to come: not a position to confirm.
		if !r.inTx {
			r.push(event{kind: evPosition, lsn: k.ServerWALEnd})
		}
		return nil
	case pglogrepl.XLogDataByteID:
		x, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return fmt.Errorf("parse XLogData: %w", err)
		}
		return r.logical(ctx, x.WALData)
	}
	return nil
}

// logical handles one pgoutput message.
func (r *reader) logical(ctx context.Context, data []byte) error {
	if len(data) > 0 && data[0] == byte(pglogrepl.MessageTypeInsert) {
		return r.insert(ctx, data)
	}
	msg, err := pglogrepl.Parse(data)
	if err != nil {
		return fmt.Errorf("parse pgoutput message: %w", err)
	}
	s := r.s
	switch m := msg.(type) {
	case *pglogrepl.RelationMessage:
		r.relations[m.RelationID] = newRelation(m)
	case *pglogrepl.BeginMessage:
		r.inTx = true
		r.push(event{kind: evBegin, lsn: m.FinalLSN, at: m.CommitTime, xid: m.Xid})
	case *pglogrepl.CommitMessage:
		r.inTx = false
		r.push(event{kind: evCommit, lsn: m.TransactionEndLSN})
		if s.slotFault.Load() != nil {
			s.slotFault.Store(nil) // the server decodes the slot again
		}
	case *pglogrepl.LogicalDecodingMessage:
		if m.Prefix == s.cfg.watermarkPrefix() {
			r.push(event{kind: evWatermark, token: string(m.Content)})
		}
	}
	return nil // updates, deletes and truncates are not published; origins and types do not matter
}

// insert reads an inserted row. A row of the outbox table to relay waits
// for its share of the budget before it goes to the pipeline.
func (r *reader) insert(ctx context.Context, data []byte) error {
	s := r.s
	rel, cols, err := parseInsert(data, r.cols)
	r.cols = cols
	if err != nil {
		return err
	}
	relation, ok := r.relations[rel]
	if !ok {
		return fmt.Errorf("insert into relation %d before its description", rel)
	}
	if !relation.is(s.table) {
		return nil // the publication was extended by hand
	}
	if relation.missing != "" {
		// Sent without a column the relay reads: the publication had a
		// column list when the row was committed (publicationFilter names
		// it), and the slot decodes the row with that catalog for ever.
		// The row stays pending in the table: the sweep publishes it.
		if !relation.warned {
			relation.warned = true
			s.logger.Warn("rows of the outbox table arrive from the slot without column "+relation.missing+
				" (a column list on the publication when they were committed): the sweep publishes them from the table, late and not in commit order",
				slog.String("publication", s.cfg.Publication))
		}
		return nil
	}
	d, err := relation.decode(r.types, cols, s.cfg.payloadLimit())
	clear(r.cols) // the tuple points into the read buffer
	if err != nil {
		return fmt.Errorf("read an inserted row of %s: %w", s.cfg.Table, err)
	}
	switch d.status {
	case "pending", "failed", "":
	default:
		return nil // inserted settled (done, a dead letter): nothing to relay
	}
	if err := r.take(ctx, rowSize(&d.row)); err != nil {
		return err
	}
	r.push(event{kind: evRow, row: d})
	return nil
}

// take waits until the budget has room for a row of size bytes and takes
// it, keeping the connection alive and the confirmed position current
// meanwhile. The events in hand go to the pipeline first: their rows may
// be what holds the room.
func (r *reader) take(ctx context.Context, size int64) error {
	b := r.s.budget
	if b.take(size, false) {
		return nil
	}
	if err := r.flush(ctx); err != nil {
		return err
	}
	tick := time.NewTicker(statusMinInterval)
	defer tick.Stop()
	for {
		select {
		case <-b.freed:
			if b.take(size, false) {
				return nil
			}
		case <-tick.C:
			if err := r.maybeSendStatus(); err != nil {
				return err
			}
		case <-ctx.Done():
			return errStopped
		}
	}
}

// maybeSendStatus tells the server the confirmed position when it moved
// (at most every statusMinInterval), when the server asked, and at least
// every statusEvery (Config.StatusInterval, or a third of the server's
// wal_sender_timeout when that is shorter).
func (r *reader) maybeSendStatus() error {
	c := r.s.confirmed.Load()
	since := time.Since(r.lastStatus)
	if r.replyRequested || (c != r.lastSent && since >= statusMinInterval) || since >= r.statusEvery {
		return r.sendStatus()
	}
	return nil
}

func (r *reader) sendStatus() error {
	c := r.s.confirmed.Load()
	lsn := pglogrepl.LSN(c)
	err := pglogrepl.SendStandbyStatusUpdate(context.Background(), r.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: lsn, WALFlushPosition: lsn, WALApplyPosition: lsn, ClientTime: time.Now(),
	})
	if err != nil {
		return fmt.Errorf("send standby status: %w", err)
	}
	r.lastStatus, r.lastSent, r.replyRequested = time.Now(), c, false
	return nil
}

// push adds ev to the batch in hand; see flush.
func (r *reader) push(ev event) { r.batch = append(r.batch, ev) }

// flush hands the batch in hand to the pipeline. While the pipeline does
// not take it (its window is full, or it is draining), the reader keeps
// the connection alive and the confirmed position current with status
// updates.
func (r *reader) flush(ctx context.Context) error {
	if len(r.batch) == 0 {
		return nil
	}
	batch := r.batch
	select {
	case r.s.events <- batch:
		r.batch = make([]event, 0, len(batch))
		return nil
	default:
	}
	tick := time.NewTicker(statusMinInterval)
	defer tick.Stop()
	for {
		select {
		case r.s.events <- batch:
			r.batch = make([]event, 0, len(batch))
			return nil
		case <-tick.C:
			if err := r.maybeSendStatus(); err != nil {
				return err
			}
		case <-ctx.Done():
			return errStopped
		}
	}
}

// discard gives back the budget of the rows in the batch in hand, when
// the session ends: the next session reads them again.
func (r *reader) discard() {
	for _, ev := range r.batch {
		if ev.kind == evRow {
			r.s.budget.give(1, rowSize(&ev.row.row))
		}
	}
	r.batch = nil
}
