package postgreswal

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/source"
)

// publicationCheckEvery is how often a running relay reads its publication
// from the catalog. A table dropped from the publication (ALTER
// PUBLICATION … DROP TABLE) ends no replication session: the server just
// stops sending its inserts, and without this check the rows would reach
// the relay only through the sweep, late and out of commit order, with
// every probe green.
const publicationCheckEvery = 5 * time.Second

// publicationFault says what is wrong with the publication, with the fix;
// "" when nothing is.
func publicationFault(n Names, p publicationState) string {
	switch {
	case !p.exists:
		return publicationDropped(n)
	case !p.insert || !p.hasTable:
		return fmt.Sprintf("publication %s does not publish the inserts of %s (the table dropped from it, ALTER PUBLICATION %s DROP TABLE, or its publish option without insert): "+
			"this relay receives no new row of the table from the slot, only through the sweep, late and not in commit order; "+
			"run `bridge migrate` (same database.url, database.table and wal.*), which makes it publish them again",
			n.Publication, n.Table, n.Publication)
	case p.partial != "":
		return fmt.Sprintf("publication %s publishes %s with %s: this relay receives the rows it filters out, or rows without those columns, only through the sweep, late and not in commit order; "+
			"run `bridge migrate` (same database.url, database.table and wal.*), which makes it publish every row and column of the table again",
			n.Publication, n.Table, p.partial)
	}
	return ""
}

// publicationDropped is the fault of a publication that does not exist.
func publicationDropped(n Names) string {
	return fmt.Sprintf("publication %s does not exist (dropped?): PostgreSQL decodes the slot with the catalog of each change's time, "+
		"so it refuses the slot's changes after the drop even once the publication exists again; run `bridge migrate` "+
		"(same database.url, database.table and wal.*), which creates the publication and, while PostgreSQL still refuses "+
		"the slot, makes the slot again (the rows committed meanwhile are then published by the sweep)", n.Publication)
}

// isPublicationMissing reports the server's error for a session whose
// publication does not exist: SQLSTATE 42704 (undefined_object),
// `publication "x" does not exist` (pgoutput's LoadPublications via
// GetPublicationByName, src/backend/replication/pgoutput/pgoutput.c).
func isPublicationMissing(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42704" && strings.HasPrefix(pgErr.Message, "publication ")
}

// publicationLoop reads the publication every publicationCheckEvery until
// the subscriber closes, and keeps the fault readiness and the metric
// report. A read that fails (the database away) changes nothing: the
// database's own probes say so.
func (s *Subscriber) publicationLoop() {
	for {
		select {
		case <-s.closing:
			return
		case <-time.After(publicationCheckEvery):
		}
		ctx, cancel := context.WithTimeout(s.hardCtx, publicationCheckEvery)
		all, err := s.stream.publication(ctx)
		p := all.of(s.table)
		if err == nil {
			fault := publicationFault(s.cfg.Names, p)
			if p.exists && !p.hasTable {
				// Not in the publication because not there at all: bridge
				// migrate would make a new, empty table beside the rows.
				if _, lookErr := resolveTable(ctx, s.db.SQL, s.cfg.Table); errors.Is(lookErr, outbox.ErrNoTable) {
					fault = source.TableGone(s.cfg.Table).Error()
				}
			}
			s.setPublicationFault(fault)
		}
		if err == nil && p.exists && p.insert && p.hasTable && s.stream.slotFault.Load() != nil && s.stream.state.Load().streaming {
			// The server refused the slot, and a session streams again
			// (the slot made again): a transaction of its own, a logical
			// message the reader ignores, shows whether the server
			// decodes past now; its commit ends the fault (stream.go).
			// Without it an idle outbox would keep /readyz failing.
			if _, err := s.db.SQL.ExecContext(ctx, "SELECT pg_logical_emit_message(true, $1, 'probe')", s.cfg.watermarkPrefix()+"/probe"); err != nil {
				s.logger.Debug("publication probe", slog.Any("error", err))
			}
		}
		cancel()
	}
}

// setPublicationFault records fault ("" : none), logging a change: ERROR
// with the fix when one begins or changes, INFO when it ends.
func (s *Subscriber) setPublicationFault(fault string) {
	old := s.pubFault.Swap(&fault)
	was := ""
	if old != nil {
		was = *old
	}
	switch {
	case fault == was:
	case fault == "" && s.stream.slotFault.Load() != nil:
		s.logger.Warn("publication exists again, but the server still refuses the slot's changes for it: run `bridge migrate`, which makes the slot again",
			slog.String("publication", s.cfg.Publication))
	case fault == "":
		s.logger.Info("publication repaired: it publishes the table's inserts again; the sweep publishes the rows the slot did not deliver, now",
			slog.String("publication", s.cfg.Publication))
		select {
		case s.sweepNow <- struct{}{}:
		default: // a sweep is asked for already
		}
	default:
		s.logger.Error("publication fault", slog.String("publication", s.cfg.Publication), slog.String("error", fault))
	}
}

// PublicationFault is the publication's fault with its fix, as /readyz
// says it: the last check of the catalog found one, or the server refused
// the slot's changes for the publication and has not decoded a transaction
// since (it does so after the publication exists again, until the slot
// is made again); "" when neither.
func (s *Subscriber) PublicationFault() string {
	if f := s.pubFault.Load(); f != nil && *f != "" {
		return *f
	}
	if f := s.stream.slotFault.Load(); f != nil {
		return *f
	}
	return ""
}

// repairPublication makes an existing publication p publish the inserts
// of the table again (bridge migrate): it adds the table when the
// publication does not have it, and insert to what it publishes when that
// is missing, keeping what else it publishes. It returns what it did.
func repairPublication(ctx context.Context, db *sql.DB, n Names, p publicationState) (string, error) {
	var did []string
	if !p.hasTable {
		// Names are validated (config: wal.publication, database.table).
		if _, err := db.ExecContext(ctx, "ALTER PUBLICATION "+n.Publication+" ADD TABLE "+n.Table); err != nil {
			return "", fmt.Errorf("add %s to publication %s: %w", n.Table, n.Publication, err)
		}
		did = append(did, "added "+n.Table)
	}
	if p.hasTable && p.partial != "" {
		// Dropped and added again in one transaction: the table without
		// a column list or row filter, and nothing else changed.
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return "", err
		}
		defer tx.Rollback() //nolint:errcheck // after Commit: nothing to roll back
		for _, stmt := range []string{"ALTER PUBLICATION " + n.Publication + " DROP TABLE " + n.Table, "ALTER PUBLICATION " + n.Publication + " ADD TABLE " + n.Table} {
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return "", fmt.Errorf("make publication %s publish every row and column of %s: %w", n.Publication, n.Table, err)
			}
		}
		if err := tx.Commit(); err != nil {
			return "", fmt.Errorf("make publication %s publish every row and column of %s: %w", n.Publication, n.Table, err)
		}
		did = append(did, "publishes every row and column of "+n.Table+" (was "+p.partial+")")
	}
	if !p.insert {
		publish := []string{"insert"}
		for _, op := range []struct {
			name string
			on   bool
		}{{"update", p.update}, {"delete", p.delete}, {"truncate", p.truncate}} {
			if op.on {
				publish = append(publish, op.name)
			}
		}
		if _, err := db.ExecContext(ctx, "ALTER PUBLICATION "+n.Publication+" SET (publish = '"+strings.Join(publish, ", ")+"')"); err != nil {
			return "", fmt.Errorf("make publication %s publish inserts: %w", n.Publication, err)
		}
		did = append(did, "publishes inserts")
	}
	return strings.Join(did, ", "), nil
}

// slotRefusesPublication reports whether PostgreSQL refuses to decode the
// slot's next changes for the publication (a publication dropped and
// created again: isPublicationMissing), by peeking at them without
// consuming them (pg_logical_slot_peek_binary_changes, up to the current
// position; slotPeekTimeout).
// Errors: ErrSlotActive while a session holds the slot.
func slotRefusesPublication(ctx context.Context, db *sql.DB, n Names) (bool, error) {
	// Up to the current position: the changes a dropped publication is
	// missing for may come after many it is not (those committed before
	// the drop), and decoding stops at the first refused one. Bounded by
	// slotPeekTimeout.
	ctx, cancel := context.WithTimeout(ctx, slotPeekTimeout)
	defer cancel()
	var changes int
	err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_logical_slot_peek_binary_changes($1, pg_current_wal_lsn(), NULL,
	'proto_version', '1', 'publication_names', $2)`, n.Slot, n.Publication).Scan(&changes)
	switch {
	case err == nil:
		return false, nil
	case isPublicationMissing(err):
		return true, nil
	case inUse(err):
		return false, fmt.Errorf("%w: replication slot %s: %w", ErrSlotActive, n.Slot, err)
	case ctx.Err() != nil:
		return false, fmt.Errorf("could not tell within %s whether PostgreSQL decodes replication slot %s for publication %s (its backlog is long); "+
			"if the relay keeps logging that the publication does not exist, run `bridge slot drop` and then `bridge migrate`: %w", slotPeekTimeout, n.Slot, n.Publication, err)
	}
	return false, fmt.Errorf("read the next changes of replication slot %s: %w", n.Slot, err)
}

// slotPeekTimeout bounds slotRefusesPublication's read of a slot's backlog.
const slotPeekTimeout = 60 * time.Second

// publicationNewerThanSlot reports whether the publication's catalog row
// was written by a transaction newer than the slot's catalog_xmin, the
// oldest catalog state its changes are decoded with (pg_replication_slots;
// age() compares transaction ids across wraparound).
func publicationNewerThanSlot(ctx context.Context, db *sql.DB, n Names) (bool, error) {
	var newer sql.NullBool
	err := db.QueryRowContext(ctx, `SELECT age(p.xmin) < age(s.catalog_xmin)
FROM pg_publication p, pg_replication_slots s WHERE p.pubname = $1 AND s.slot_name = $2`, n.Publication, n.Slot).Scan(&newer)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return false, fmt.Errorf("compare publication %s with replication slot %s: %w", n.Publication, n.Slot, err)
	}
	return newer.Bool, nil
}

// inUse reports SQLSTATE 55006 (object_in_use): a session holds the slot.
func inUse(err error) bool {
	var pgErr *pgconn.PgError
	return errors.Is(err, ErrSlotActive) || errors.As(err, &pgErr) && pgErr.Code == "55006"
}

// whileInUse runs f until it does not fail with the slot in use, for up
// to 15 s (a relay's session attempts are 5 s apart).
func whileInUse(ctx context.Context, f func() error) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := f()
		if !inUse(err) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Repair heals what `bridge migrate` can of a publication and slot that
// exist but no longer serve the table (before Setup, which creates what is
// missing): a publication that does not publish the table's inserts gets
// them back (repairPublication); a slot PostgreSQL refuses to decode for
// the publication (dropped and created again) is dropped, for Setup to
// make again; the rows committed since its confirmed position are then
// published by the sweep of the relay. It returns what it did, one line
// each. Errors: ErrSlotActive when the slot to drop is in use.
func Repair(ctx context.Context, db *sql.DB, n Names) ([]string, error) {
	var did []string
	p, err := readPublication(ctx, db, n)
	if err != nil {
		return nil, err
	}
	exists := p.exists
	if exists && (!p.hasTable || !p.insert || p.partial != "") {
		what, err := repairPublication(ctx, db, n, p)
		if err != nil {
			return nil, err
		}
		did = append(did, "repaired publication "+n.Publication+": "+what)
	}
	info, err := SlotStatus(ctx, db, n.Slot)
	if errors.Is(err, ErrNoSlot) {
		return did, nil // Setup creates what is missing
	} else if err != nil {
		return nil, err
	}
	if exists {
		if info.Active {
			return did, nil // a relay streams from the slot with the publication
		}
		// Only a publication created after the oldest catalog state the
		// slot still decodes with can be missing for some of its changes;
		// one older than that (Setup creates it before the slot) cannot,
		// and the slot's backlog is not read.
		newer, err := publicationNewerThanSlot(ctx, db, n)
		if err != nil || !newer {
			return did, err
		}
	} else {
		// The slot outlived its publication: create it, then see whether
		// PostgreSQL decodes the slot for it.
		if _, err := setupPublication(ctx, db, n); err != nil {
			return nil, err
		}
		did = append(did, "created publication "+n.Publication+" of the inserts of "+n.Table+" again")
	}
	// A relay whose session fails retries it every 5 s, holding the
	// slot for a moment each time: a peek or drop that finds it in use
	// tries again.
	var refused bool
	if err := whileInUse(ctx, func() error {
		var err error
		refused, err = slotRefusesPublication(ctx, db, n)
		return err
	}); err != nil || !refused {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42501" { // insufficient_privilege: no REPLICATION for the peek
			return append(did, fmt.Sprintf("could not check whether PostgreSQL decodes replication slot %s for publication %s (%s); "+
				"if the relay keeps logging that the publication does not exist, run `bridge slot drop`, then `bridge migrate`", n.Slot, n.Publication, pgErr.Message)), nil
		}
		return did, err
	}
	if err := whileInUse(ctx, func() error { return DropSlot(ctx, db, n.Slot) }); err != nil {
		return nil, err
	}
	return append(did, "dropped replication slot "+n.Slot+": PostgreSQL refused its changes for publication "+n.Publication+
		" (dropped and created again); it is made again, and the relay's sweep publishes the rows committed since its confirmed position"), nil
}
