package postgreswal

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outbox-bridge/bridge/internal/outbox"
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

// slotStream is the reader of one replication slot and what it shares
// with the subscribers it serves: one per table of its publication that
// the relay relays (one table, or a Group's). It owns the replication
// connection, the in-flight budget, the stream's state and the server's
// clock; each subscriber has its own pipeline, window and marks, and the
// slot's confirmed position is the least of theirs.
type slotStream struct {
	db     *outbox.DB
	repl   *pgconn.Config
	cfg    Config // Slot, Publication and StatusInterval
	logger *slog.Logger
	budget *budget

	mu        sync.Mutex // serializes changes of members
	members   atomic.Pointer[memberSet]
	state     atomic.Pointer[streamState]
	slotFault atomic.Pointer[string] // the server refused the slot's changes for the publication; nil: it decodes them
	// checkBelow: rows of transactions committed before this LSN, the
	// server's WAL position when the session acquired the slot, are
	// checked against the table before they are published (check.go).
	checkBelow  atomic.Uint64
	clockOffset atomic.Int64 // server clock minus this process's clock, ns (from keepalives)
	// start is the slot's confirmed position when the relay started; idle
	// the last position handed to every subscriber: what the stream
	// confirms while it serves none.
	start, idle atomic.Uint64
	stop        chan struct{} // closed once the subscribers are done: the reader sends the final position and stops

	// The publication as last read (publication), for every subscriber.
	pubMu  sync.Mutex
	pub    publicationTables
	pubAt  time.Time
	pubErr error
}

// publication returns the publication and its tables as read at most
// publicationReuse ago, reading them again when older: the subscribers'
// checks (publicationLoop, every publicationCheckEvery each) share one
// read, so a stream over 200 tables reads the catalog about once a
// second, not 200 times (twice as many statements before: the
// publication, then each table's filters) every 5 s.
func (st *slotStream) publication(ctx context.Context) (publicationTables, error) {
	st.pubMu.Lock()
	defer st.pubMu.Unlock()
	if !st.pubAt.IsZero() && time.Since(st.pubAt) < publicationReuse {
		return st.pub, st.pubErr // a failed read too: the database away fails them all alike
	}
	st.pub, st.pubErr = readPublicationTables(ctx, st.db.SQL, st.cfg.Publication)
	st.pubAt = time.Now()
	return st.pub, st.pubErr
}

// publicationReuse is how long one read of the publication serves the
// subscribers' checks.
const publicationReuse = time.Second

// memberSet are the subscribers a slotStream serves, by table.
type memberSet struct {
	all     []*Subscriber
	byTable map[qualifiedName]*Subscriber
}

// newSlotStream returns the reader of cfg.Slot over cfg.Publication,
// connecting with repl, from the slot's confirmed position start.
func newSlotStream(db *outbox.DB, repl *pgconn.Config, cfg Config, start pglogrepl.LSN, logger *slog.Logger) *slotStream {
	st := &slotStream{db: db, repl: repl, cfg: cfg, stop: make(chan struct{}),
		budget: newBudget(int64(cfg.MaxInFlight), cfg.MaxInFlightBytes),
		logger: logger.With(slog.String("component", "postgres-wal"), slog.String("slot", cfg.Slot))}
	st.members.Store(&memberSet{byTable: map[qualifiedName]*Subscriber{}})
	st.start.Store(uint64(start))
	st.state.Store(&streamState{err: errors.New("not started")})
	return st
}

// add makes the stream hand s the rows of its table. s starts at the
// stream's confirmed position: nothing before it is s's to settle.
func (st *slotStream) add(s *Subscriber) {
	st.mu.Lock()
	defer st.mu.Unlock()
	s.confirmed.Store(st.confirmed())
	old := st.members.Load()
	set := &memberSet{all: append(slices.Clip(old.all), s), byTable: maps.Clone(old.byTable)}
	set.byTable[s.table] = s
	st.members.Store(set)
}

// remove makes the stream forget s (its table let go): s no longer holds
// the slot's position. Rows of its table read after this stay pending in
// the table.
func (st *slotStream) remove(s *Subscriber) {
	st.mu.Lock()
	defer st.mu.Unlock()
	old := st.members.Load()
	set := &memberSet{byTable: maps.Clone(old.byTable)}
	for _, m := range old.all {
		if m != s {
			set.all = append(set.all, m)
		}
	}
	if set.byTable[s.table] == s {
		delete(set.byTable, s.table)
	}
	if len(set.all) == 0 {
		st.idle.Store(max(st.idle.Load(), s.confirmed.Load()))
	}
	st.members.Store(set)
}

// confirmed is the slot position the stream may confirm: the least of
// its subscribers' (each confirms a position once every row of its table
// before it is settled), or with none the last position handed to all.
func (st *slotStream) confirmed() uint64 {
	set := st.members.Load()
	if len(set.all) == 0 {
		return max(st.start.Load(), st.idle.Load())
	}
	c := uint64(math.MaxUint64)
	for _, s := range set.all {
		c = min(c, s.confirmed.Load())
	}
	return c
}

// memberOf returns the subscriber of rel's table; nil when the relay does
// not relay it, or its subscriber stops.
func (st *slotStream) memberOf(rel *relation) *Subscriber {
	if set := st.members.Load(); rel.set != set {
		rel.set, rel.member = set, set.byTable[qualifiedName{schema: rel.schema, name: rel.name}]
	}
	if rel.member == nil || rel.member.isClosing() {
		return nil
	}
	return rel.member
}

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
func (st *slotStream) loop() {
	backoff := 100 * time.Millisecond
	sessions := 0
	var logged string // the last waiting state logged
	for {
		started, err := st.session(sessions > 0)
		if started {
			sessions++
			backoff, logged = 100*time.Millisecond, ""
		}
		if errors.Is(err, errStopped) || st.stopping() {
			return
		}
		var pgErr *pgconn.PgError
		standby := errors.As(err, &pgErr) && pgErr.Code == "55006"
		operator := needsOperator(err)
		if isPublicationMissing(err) {
			// Until the server decodes a transaction of the slot again:
			// the publication's catalog row may exist again meanwhile.
			fault := publicationDropped(st.cfg.Names)
			st.slotFault.Store(&fault)
			err = fmt.Errorf("%w: %w; %s", ErrNoSlot, err, fault)
		} else if operator {
			err = fmt.Errorf("%w: %w; create the slot and the publication with `bridge migrate` (after `bridge slot drop` for an invalidated slot): the relay then starts on its own and publishes the rows still pending (the sweep)",
				ErrNoSlot, err)
		}
		state := &streamState{standby: standby, err: err}
		if standby {
			state.holder = st.describeHolder()
		}
		for _, m := range st.members.Load().all {
			m.readTableLag()
		}
		st.state.Store(state)
		wait := backoff
		switch {
		case standby:
			wait = 5 * time.Second
			if logged != "standby" {
				st.logger.Info("replication slot in use by another process; waiting for it (standby)", slog.String("reason", pgErr.Message),
					slog.String("holder", state.holder))
			}
			logged = "standby"
		case operator:
			wait = 5 * time.Second
			if logged != err.Error() {
				st.logger.Error("replication stream cannot start; waiting for the slot", slog.Any("error", err), slog.Duration("retry_every", wait))
			}
			logged = err.Error()
		default:
			logged = ""
			st.logger.Warn("replication stream interrupted; starting it again", slog.Any("error", err), slog.Duration("retry_in", wait))
			backoff = min(backoff*2, 5*time.Second)
		}
		select {
		case <-time.After(wait):
		case <-st.stop:
			return
		}
	}
}

func (st *slotStream) stopping() bool { return source.Closed(st.stop) }

// session streams from one replication connection until it fails or the
// subscribers stop; started says whether replication started. After the
// first session, the pipelines are told that the server sends again
// everything after the confirmed position.
func (st *slotStream) session(again bool) (started bool, err error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-st.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	conn, err := pgconn.ConnectConfig(ctx, st.repl)
	if err != nil {
		return false, fmt.Errorf("replication connection: %w", err)
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		conn.Close(closeCtx)
	}()
	statusEvery := st.statusInterval(ctx, conn)
	start := pglogrepl.LSN(st.confirmed())
	err = pglogrepl.StartReplication(ctx, conn, st.cfg.Slot, start, pglogrepl.StartReplicationOptions{PluginArgs: []string{
		"proto_version '1'",
		"publication_names '" + st.cfg.Publication + "'",
		"binary 'true'",   // PostgreSQL 14+: bytea as bytes, not hex text
		"messages 'true'", // PostgreSQL 14+: the sweep's watermarks
	}})
	if err != nil {
		return false, fmt.Errorf("start replication from slot %s at %s: %w", st.cfg.Slot, start, err)
	}
	// No earlier holder of the slot can have read past the server's WAL
	// position now: the rows committed before it are checked (check.go).
	st.checkBelow.Store(st.walPosition(ctx))
	r := &reader{st: st, conn: conn, relations: map[uint32]*relation{}, types: pgtype.NewMap(), statusEvery: statusEvery,
		batches: map[*Subscriber][]event{}, lastEnd: start}
	defer r.discard()
	if again {
		r.toAll(event{kind: evRestart})
	}
	st.state.Store(&streamState{streaming: true})
	st.logger.Info("streaming from replication slot", slog.String("from", start.String()), slog.String("publication", st.cfg.Publication))
	err = r.run(ctx)
	if st.stopping() {
		r.sendStatus() // the final position, once the pipelines are done
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
func (st *slotStream) statusInterval(ctx context.Context, conn *pgconn.PgConn) time.Duration {
	every := st.cfg.StatusInterval
	res, err := conn.Exec(ctx, "SHOW wal_sender_timeout").ReadAll()
	var text string
	if err == nil && len(res) == 1 && len(res[0].Rows) == 1 && len(res[0].Rows[0]) == 1 {
		text = string(res[0].Rows[0][0])
	}
	timeout, perr := parseGUCDuration(text)
	switch {
	case err != nil || perr != nil:
		st.logger.Warn("cannot read wal_sender_timeout; sending standby status every second", slog.String("value", text), slog.Any("error", cmp.Or(err, perr)))
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
func (st *slotStream) walPosition(ctx context.Context) uint64 {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var text string
	if err := st.db.SQL.QueryRowContext(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&text); err != nil {
		st.logger.Warn("cannot read the server's WAL position; checking every row of this session against the table", slog.Any("error", err))
		return math.MaxUint64
	}
	lsn, err := pglogrepl.ParseLSN(text)
	if err != nil {
		return math.MaxUint64
	}
	return uint64(lsn)
}

// reader decodes one session's messages into events and hands each
// subscriber its own: the rows of its table, the begin and commit of
// each transaction that holds one, and the positions and watermarks that
// concern every table.
type reader struct {
	st        *slotStream
	conn      *pgconn.PgConn
	relations map[uint32]*relation
	types     *pgtype.Map
	cols      []tupleColumn // scratch of parseInsert
	inTx      bool
	// begin is the open transaction's begin, handed to a subscriber before
	// its first row of the transaction; inTxOf are the subscribers it was
	// handed to, which get its commit.
	begin  event
	inTxOf []*Subscriber
	// batches are the events not yet handed to each subscriber; held
	// counts them.
	batches map[*Subscriber][]event
	held    int
	// lastEnd is the last position every subscriber may confirm: the end
	// of the last commit read, or a keepalive's position between
	// transactions. The subscribers without a row in the open transaction
	// are handed it at most every statusMinInterval (positioned), so that
	// a table whose rows are rare does not hold the slot's position.
	lastEnd, lastHanded pglogrepl.LSN
	positioned          time.Time

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
		if r.conn.Frontend().ReadBufferLen() == 0 || r.held >= eventBatchMax {
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
		r.st.clockOffset.Store(int64(time.Until(k.ServerTime)))
		r.replyRequested = r.replyRequested || k.ReplyRequested
		// Between transactions everything before ServerWALEnd was sent.
		// Inside one (a keepalive can come in the middle of a large
		// transaction's changes), the transaction's commit may lie before
		// it while its rest is still to come: not a position to confirm.
		if !r.inTx && k.ServerWALEnd > r.lastEnd {
			r.lastEnd = k.ServerWALEnd
			r.position(true)
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
	st := r.st
	switch m := msg.(type) {
	case *pglogrepl.RelationMessage:
		r.relations[m.RelationID] = newRelation(m)
	case *pglogrepl.BeginMessage:
		r.inTx = true
		r.begin = event{kind: evBegin, lsn: m.FinalLSN, at: m.CommitTime, xid: m.Xid}
		r.inTxOf = r.inTxOf[:0]
	case *pglogrepl.CommitMessage:
		r.inTx = false
		for _, sub := range r.inTxOf {
			r.push(sub, event{kind: evCommit, lsn: m.TransactionEndLSN})
		}
		r.inTxOf = r.inTxOf[:0]
		r.lastEnd = max(r.lastEnd, m.TransactionEndLSN)
		if st.slotFault.Load() != nil {
			st.slotFault.Store(nil) // the server decodes the slot again
		}
	case *pglogrepl.LogicalDecodingMessage:
		if m.Prefix == st.cfg.watermarkPrefix() {
			r.toAll(event{kind: evWatermark, token: string(m.Content)})
		}
	}
	return nil // updates, deletes and truncates are not published; origins and types do not matter
}

// insert reads an inserted row. A row of a table this relay relays waits
// for its share of the budget before it goes to the table's pipeline.
func (r *reader) insert(ctx context.Context, data []byte) error {
	rel, cols, err := parseInsert(data, r.cols)
	r.cols = cols
	if err != nil {
		return err
	}
	relation, ok := r.relations[rel]
	if !ok {
		return fmt.Errorf("insert into relation %d before its description", rel)
	}
	s := r.st.memberOf(relation)
	if s == nil {
		// Not a table this relay relays (yet): the publication was
		// extended by hand, or the table is one a pattern will match at
		// the next refresh, whose sweep then publishes its pending rows.
		return nil
	}
	if relation.missing != "" {
		// Sent without a column the relay reads: the publication had a
		// column list when the row was committed (readPublicationTables names
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
	d, err := relation.decode(r.types, cols, s.cfg.PayloadLimit())
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
	if !s.budget.charge(rowSize(&d.row)) {
		return nil // it stopped meanwhile: the row stays pending in its table
	}
	if !slices.Contains(r.inTxOf, s) {
		r.inTxOf = append(r.inTxOf, s)
		r.push(s, r.begin)
	}
	r.push(s, event{kind: evRow, row: d})
	return nil
}

// take waits until the budget has room for a row of size bytes and takes
// it, keeping the connection alive and the confirmed position current
// meanwhile. The events in hand go to the pipelines first: their rows may
// be what holds the room.
func (r *reader) take(ctx context.Context, size int64) error {
	b := r.st.budget
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
	c := r.st.confirmed()
	since := time.Since(r.lastStatus)
	if r.replyRequested || (c != r.lastSent && since >= statusMinInterval) || since >= r.statusEvery {
		return r.sendStatus()
	}
	return nil
}

func (r *reader) sendStatus() error {
	c := r.st.confirmed()
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

// push adds ev to the events in hand for sub; see flush.
func (r *reader) push(sub *Subscriber, ev event) {
	r.batches[sub] = append(r.batches[sub], ev)
	r.held++
}

// toAll adds ev to the events in hand for every subscriber.
func (r *reader) toAll(ev event) {
	for _, sub := range r.st.members.Load().all {
		r.push(sub, ev)
	}
}

// position hands lastEnd to the subscribers without a row in the open
// transaction: at once when now is set (a keepalive, which comes between
// transactions), otherwise at most every statusMinInterval. Those with a
// row in it move with its commit. With no subscriber left, lastEnd is
// what the stream confirms (slotStream.confirmed).
func (r *reader) position(now bool) {
	if r.lastEnd <= r.lastHanded || !now && time.Since(r.positioned) < statusMinInterval {
		return
	}
	for _, sub := range r.st.members.Load().all {
		if !slices.Contains(r.inTxOf, sub) {
			r.push(sub, event{kind: evPosition, lsn: r.lastEnd})
		}
	}
	if len(r.inTxOf) == 0 {
		r.st.idle.Store(uint64(r.lastEnd))
	}
	r.lastHanded, r.positioned = r.lastEnd, time.Now()
}

// flush hands the events in hand to the pipelines. While a pipeline does
// not take them (its window is full, or it is draining), the reader keeps
// the connection alive and the confirmed position current with status
// updates; a subscriber that stopped (a table let go) no longer takes
// events: its are dropped, its rows stay pending in its table.
func (r *reader) flush(ctx context.Context) error {
	r.position(false)
	for sub, batch := range r.batches {
		if len(batch) == 0 {
			continue
		}
		if err := r.hand(ctx, sub, batch); err != nil {
			return err
		}
		r.held -= len(batch)
		r.batches[sub] = make([]event, 0, len(batch))
	}
	return nil
}

// hand gives sub a batch of events (see flush).
func (r *reader) hand(ctx context.Context, sub *Subscriber, batch []event) error {
	select {
	case sub.events <- batch:
		return nil
	default:
	}
	tick := time.NewTicker(statusMinInterval)
	defer tick.Stop()
	for {
		select {
		case sub.events <- batch:
			return nil
		case <-sub.closing:
			r.giveBack(sub, batch)
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

// discard gives back the budget of the rows in the events in hand, when
// the session ends: the next session reads them again.
func (r *reader) discard() {
	for sub, batch := range r.batches {
		r.giveBack(sub, batch)
	}
	r.batches, r.held = nil, 0
}

// giveBack gives back the budget of the rows among events, taken for sub.
func (r *reader) giveBack(sub *Subscriber, events []event) {
	for _, ev := range events {
		if ev.kind == evRow {
			sub.budget.give(1, rowSize(&ev.row.row))
		}
	}
}
