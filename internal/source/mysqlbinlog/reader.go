package mysqlbinlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/outbox-bridge/bridge/internal/outbox"
)

// txn is what the reader hands the pipeline: the rows one committed
// transaction inserted into the table, in log order, and the position
// past its commit. A txn without rows only moves the position. A
// transaction larger than a batch comes in parts: the parts before the
// last have commit false and no position (a transaction is in the binary
// log only once it commits, so its rows can be published before its end
// is read; the position stored never falls inside it).
type txn struct {
	rows   []*entry
	bytes  int64
	pos    Position
	commit bool
	at     time.Time // commit time (the event's timestamp, seconds)
}

// columns are the ordinals of the columns the relay reads in the table's
// row images.
type columns struct {
	count                                                                        int
	id, key, subject, payload, headers, orderingKey, status, attempts, createdAt int
}

// columnsOf are the ordinals of the table map's named columns (the
// binary log's own, binlog_row_metadata = FULL), cached for the last table
// map read: every rows event follows its table's map.
func (s *Subscriber) columnsOf(tm *replication.TableMapEvent) (columns, error) {
	if tm == s.lastMap {
		return s.mapCols, s.mapErr
	}
	s.lastMap = tm
	names := make([]string, len(tm.ColumnName))
	for i, n := range tm.ColumnName {
		names[i] = string(n)
	}
	if len(names) == 0 {
		s.mapCols, s.mapErr = columns{}, errors.New("the binary log names no columns (binlog_row_metadata is not FULL): the row is left to the sweep")
	} else {
		s.mapCols, s.mapErr = columnsFrom(names)
	}
	return s.mapCols, s.mapErr
}

// columnsFrom finds the columns the relay reads among names, in order.
func columnsFrom(names []string) (columns, error) {
	c := columns{id: -1, key: -1, subject: -1, payload: -1, headers: -1, orderingKey: -1, status: -1, attempts: -1, createdAt: -1}
	for i, col := range names {
		c.count++
		switch strings.ToLower(col) {
		case "id":
			c.id = i
		case "idempotency_key":
			c.key = i
		case "subject":
			c.subject = i
		case "payload":
			c.payload = i
		case "headers":
			c.headers = i
		case "ordering_key":
			c.orderingKey = i
		case "status":
			c.status = i
		case "attempts":
			c.attempts = i
		case "created_at":
			c.createdAt = i
		}
	}
	for name, i := range map[string]int{"id": c.id, "idempotency_key": c.key, "subject": c.subject, "payload": c.payload, "headers": c.headers,
		"ordering_key": c.orderingKey, "status": c.status, "attempts": c.attempts, "created_at": c.createdAt} {
		if i < 0 {
			return c, fmt.Errorf("no column %s: not a bridge table (bridge migrate makes one)", name)
		}
	}
	return c, nil
}

// readColumns reads the table's column ordinals from information_schema.
func readColumns(ctx context.Context, db *sql.DB, schema, name string) (columns, error) {
	rows, err := db.QueryContext(ctx, `SELECT column_name FROM information_schema.columns
		WHERE table_schema = ? AND table_name = ? ORDER BY ordinal_position`, schema, name)
	if err != nil {
		return columns{}, fmt.Errorf("read the columns of %s.%s: %w", schema, name, err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var col string
		if err := rows.Scan(&col); err != nil {
			return columns{}, err
		}
		names = append(names, col)
	}
	if err := rows.Err(); err != nil {
		return columns{}, err
	}
	c, err := columnsFrom(names)
	if err != nil {
		return c, fmt.Errorf("%s.%s: %w", schema, name, err)
	}
	return c, nil
}

// syncerConfig is the replication connection's configuration, from the
// relay's database URL.
func (s *Subscriber) syncerConfig() (replication.BinlogSyncerConfig, error) {
	dc, err := outbox.MySQLConfig(s.cfg.URL)
	if err != nil {
		return replication.BinlogSyncerConfig{}, err
	}
	if dc.Net != "tcp" {
		return replication.BinlogSyncerConfig{}, fmt.Errorf("%w: %s: source: mysql-binlog reads the binary log over TCP; give host:port", outbox.ErrUnknownScheme, outbox.RedactURL(s.cfg.URL))
	}
	host, port, err := net.SplitHostPort(dc.Addr)
	if err != nil {
		return replication.BinlogSyncerConfig{}, fmt.Errorf("%w: %s: address %q: %v", outbox.ErrUnknownScheme, outbox.RedactURL(s.cfg.URL), dc.Addr, err)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return replication.BinlogSyncerConfig{}, fmt.Errorf("%w: %s: port %q: %v", outbox.ErrUnknownScheme, outbox.RedactURL(s.cfg.URL), port, err)
	}
	return replication.BinlogSyncerConfig{
		ServerID: s.cfg.ServerID, Flavor: s.srv.Flavor, Host: host, Port: uint16(p), User: dc.User, Password: dc.Passwd,
		TLSConfig: dc.TLS, ParseTime: true, Localhost: "outbox-bridge",
		// A session ends on the first error: the pipeline starts the next
		// from the stored position, after the marks of what it read.
		DisableRetrySync: true,
		HeartbeatPeriod:  5 * time.Second, ReadTimeout: 30 * time.Second,
		Logger: s.quiet,
		// Events read ahead of the pipeline: the relay's memory holds at
		// most this many besides its batches.
		EventCacheCount: 64,
		// Only the table's inserts are decoded: the server sends every
		// change of every table (the relay's own marks among them), and
		// decoding their rows was most of the reader's work.
		RowsEventDecodeFunc: s.decodeRowsEvent,
	}, nil
}

// read runs one replication session from start until ctx ends or the
// stream fails, handing each transaction that inserted rows into the table
// to txs (and, at most every second, one that only moves the position).
func (s *Subscriber) read(ctx context.Context, start Position, txs chan<- txn) error {
	sc, err := s.syncerConfig()
	if err != nil {
		return err
	}
	syncer := replication.NewBinlogSyncer(sc)
	defer syncer.Close()
	var streamer *replication.BinlogStreamer
	if s.srv.GTID && start.GTID != "" {
		// A set stored before gtidPosition (two GTIDs of a domain) is
		// read as one it makes.
		set, err := gomysql.ParseGTIDSet(s.srv.Flavor, gtidPosition(s.srv.Flavor, start.GTID))
		if err != nil {
			return fmt.Errorf("stored position %s: %w", start, err)
		}
		streamer, err = syncer.StartSyncGTID(set)
		if err != nil {
			return err
		}
	} else {
		streamer, err = syncer.StartSync(gomysql.Position{Name: start.File, Pos: start.Pos})
		if err != nil {
			return err
		}
	}
	file := start.File
	started := false
	inTx := false // between a transaction's start and its commit
	lastGTID := start.GTID
	var cur []*entry
	curIndex := map[int64]int{} // a row of cur by id
	var curBytes int64
	var lastMove time.Time
	// idle holds the position past the last transaction without rows of
	// the table while it waits for its hand-over (at most one a second);
	// it is handed over when a second passes without an event. idleOwn:
	// every transaction since the last hand-over was bookkeeping (this
	// relay's marks and position, a position of another relay, changes to
	// rows of the table that insert none): handed over only while a sweep
	// waits for the position (Subscriber.wantPosition), or each position
	// write, itself a transaction, would bring the next one, for ever.
	var idle *Position
	idleOwn := false
	// Of the transaction being read: sawOwn, a rows event on the table or
	// a position table (*_binlog); sawOther, an insert into the table or a
	// rows event of another table.
	sawOwn, sawOther := false, false
	// parts: the transaction being read was handed on in parts.
	parts := false
	hand := func(t txn) bool {
		idle, idleOwn, lastMove = nil, false, time.Now()
		select {
		case txs <- t:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for {
		wait, cancel := context.WithTimeout(ctx, time.Second)
		ev, err := streamer.GetEvent(wait)
		cancel()
		if err != nil {
			switch {
			case ctx.Err() != nil:
				return nil
			case errors.Is(err, context.DeadlineExceeded):
				if idle != nil && len(cur) == 0 && (!idleOwn || s.wantPosition.Load()) && !hand(txn{pos: *idle, commit: true}) {
					return nil
				}
				continue
			}
			return err
		}
		if !started {
			// The server found the position (on MariaDB, by reading the
			// binary log file from its start: seconds for a large one) and
			// sends from it: the relay reads now.
			started = true
			s.state.Store(&readState{streaming: true})
		}
		switch e := ev.Event.(type) {
		case *replication.RotateEvent:
			file = string(e.NextLogName)
			if len(cur) == 0 && ev.Header.LogPos != 0 {
				// A real rotation (not the one the server sends first, to
				// name the file it starts in): the position moves to the
				// new file even when no transaction follows, so that a
				// sweep waiting for the server's position is not held by
				// an idle log (file and offset, where GTIDs are off).
				idle, idleOwn = &Position{GTID: lastGTID, File: file, Pos: uint32(e.Position)}, false
			}
		case *replication.RowsEvent:
			if e.Table == nil || string(e.Table.Schema) != s.schema || string(e.Table.Table) != s.name {
				// A position table, this relay's or another's (the relay of
				// another table of the server: each one's write would
				// bring the other's, for ever): bookkeeping, not a move.
				// A table of the service's named so only delays the
				// position, to the next transaction or sweep.
				if e.Table != nil && strings.HasSuffix(string(e.Table.Table), "_binlog") {
					sawOwn = true
				} else {
					sawOther = true
				}
				continue
			}
			if e.Type() != replication.EnumRowsEventTypeInsert {
				sawOwn = true
			}
			if e.Type() == replication.EnumRowsEventTypeUpdate {
				// A row its own transaction changed after inserting it (an
				// ORM's flush, the row's id written into it): published as
				// committed, as source: table would.
				cols, colsErr := s.columnsOf(e.Table)
				for i := 1; i < len(e.Rows); i += 2 {
					after := s.decode(cols, colsErr, e.Rows[i])
					if at, ok := curIndex[after.row.ID]; ok && !after.skip {
						cur[at] = after
					}
				}
				continue
			}
			if e.Type() != replication.EnumRowsEventTypeInsert {
				continue
			}
			sawOther = true
			cols, colsErr := s.columnsOf(e.Table)
			for _, values := range e.Rows {
				en := s.decode(cols, colsErr, values)
				s.Counters.Read.Add(1)
				curIndex[en.row.ID] = len(cur)
				cur = append(cur, en)
				curBytes += en.row.Size()
				if len(cur) >= s.cfg.MaxInFlight || curBytes >= s.cfg.MaxInFlightBytes/2 {
					// A part of a large transaction (see txn): its rows'
					// content is the table's (pipeline.reread), an UPDATE
					// later in the transaction not being applicable here.
					parts = true
					for _, e := range cur {
						e.reread = true
					}
					if !hand(txn{rows: cur, bytes: curBytes, at: time.Unix(int64(ev.Header.Timestamp), 0)}) {
						return nil
					}
					cur, curBytes = nil, 0
					clear(curIndex)
				}
			}
		case *replication.MariadbGTIDEvent:
			// MariaDB's GTID event begins a transaction (there is no BEGIN
			// query), unless it is a statement of its own (DDL).
			inTx = !e.IsStandalone()
		case *replication.XIDEvent, *replication.QueryEvent:
			if q, ok := e.(*replication.QueryEvent); ok {
				query := strings.ToUpper(strings.TrimSpace(string(q.Query)))
				switch {
				case query == "BEGIN":
					inTx = true
					continue
				case inTx && query != "COMMIT":
					// Inside a transaction (SAVEPOINT, ROLLBACK TO …): not
					// its end, and no position to store.
					continue
				}
			}
			inTx = false
			var set gomysql.GTIDSet
			switch x := e.(type) {
			case *replication.XIDEvent:
				set = x.GSet
			case *replication.QueryEvent:
				set = x.GSet
			}
			pos := Position{File: file, Pos: ev.Header.LogPos}
			if set != nil && s.srv.GTID {
				pos.GTID = gtidPosition(s.srv.Flavor, set.String())
			}
			lastGTID = pos.GTID
			own := sawOwn && !sawOther
			sawOwn, sawOther = false, false
			if parts {
				for _, e := range cur {
					e.reread = true
				}
				parts = false
			}
			if len(cur) == 0 && (own || time.Since(lastMove) < time.Second) {
				idleOwn = own && (idle == nil || idleOwn)
				idle = &pos
				continue
			}
			t := txn{rows: cur, bytes: curBytes, pos: pos, commit: true, at: time.Unix(int64(ev.Header.Timestamp), 0)}
			cur, curBytes = nil, 0
			clear(curIndex)
			if !hand(t) {
				return nil
			}
		}
	}
}

// decodeRowsEvent decodes the rows of the table's inserts and updates and
// only the header of any other rows event.
func (s *Subscriber) decodeRowsEvent(e *replication.RowsEvent, data []byte) error {
	pos, err := e.DecodeHeader(data)
	if err != nil {
		return err
	}
	kind := e.Type()
	if kind != replication.EnumRowsEventTypeInsert && kind != replication.EnumRowsEventTypeUpdate || e.Table == nil ||
		string(e.Table.Schema) != s.schema || string(e.Table.Table) != s.name {
		return nil
	}
	return e.DecodeData(pos, data)
}

// decode turns a row image into an entry. A row the relay cannot read (a
// column of an unexpected type) becomes an entry with decodeErr: a dead
// letter naming why.
func (s *Subscriber) decode(c columns, colsErr error, values []any) *entry {
	e := &entry{}
	if colsErr != nil || len(values) != c.count {
		// Not readable from the log: the sweep publishes it from the table.
		e.skip = true
		if id, ok := asInt(values, c.id); ok && colsErr == nil {
			e.row.ID = id
		}
		if !s.toldCols {
			s.toldCols = true
			s.logger.Warn("rows of the binary log cannot be read by their columns; the sweep publishes them from the table, not in commit order", slog.Any("error", colsErr), slog.Int("values", len(values)), slog.Int("columns", c.count))
		}
		return e
	}
	var errs []error
	get := func(i int, what string) []byte {
		b, ok := asBytes(values[i])
		if !ok {
			errs = append(errs, fmt.Errorf("column %s: unexpected value of type %T", what, values[i]))
		}
		return b
	}
	id, ok := asInt(values, c.id)
	if !ok {
		errs = append(errs, fmt.Errorf("column id: unexpected value of type %T", values[c.id]))
	}
	e.row.ID = id
	e.row.IdempotencyKey = string(get(c.key, "idempotency_key"))
	e.row.Subject = string(get(c.subject, "subject"))
	payload := get(c.payload, "payload")
	e.row.PayloadSize = int64(len(payload))
	if limit := s.cfg.PayloadLimit(); limit > 0 && int64(len(payload)) > limit {
		e.row.PayloadLeftOut = true
	} else {
		e.row.Payload = payload
	}
	e.row.Headers = get(c.headers, "headers")
	if values[c.orderingKey] != nil {
		e.row.OrderingKey = sql.NullString{String: string(get(c.orderingKey, "ordering_key")), Valid: true}
	}
	e.status = string(get(c.status, "status"))
	if a, ok := asInt(values, c.attempts); ok {
		e.attempts = int(a)
	}
	switch t := values[c.createdAt].(type) {
	case time.Time:
		e.row.CreatedAt = time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)
	case string:
		e.row.CreatedAt, _ = time.Parse("2006-01-02 15:04:05.999999", t)
	}
	e.decodeErr = errors.Join(errs...)
	return e
}

func asInt(values []any, i int) (int64, bool) {
	if i < 0 || i >= len(values) {
		return 0, false
	}
	switch v := values[i].(type) {
	case int64:
		return v, true
	case int32:
		return int64(v), true
	case uint64:
		return int64(v), true
	case uint32:
		return int64(v), true
	case int:
		return int64(v), true
	}
	return 0, false
}

func asBytes(v any) ([]byte, bool) {
	switch b := v.(type) {
	case []byte:
		return b, true
	case string:
		return []byte(b), true
	case nil:
		return nil, true
	}
	return nil, false
}
