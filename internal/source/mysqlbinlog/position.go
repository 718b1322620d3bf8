package mysqlbinlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// Position is a point of the server's binary log: the GTID set of the
// transactions before it (where GTIDs are on), and the file and offset.
type Position struct {
	GTID string
	File string
	Pos  uint32
}

func (p Position) String() string {
	fp := fmt.Sprintf("%s:%d", p.File, p.Pos)
	if p.GTID != "" {
		return fmt.Sprintf("gtid %s (%s)", p.GTID, fp)
	}
	return fp
}

// covers reports whether p is at or past q: by GTID set where both have
// one (p's set contains q's; on MariaDB, p is as far in each of q's
// domains, whichever server wrote there), by file and offset otherwise.
func (p Position) covers(q Position, flavor string) bool {
	if p.GTID != "" && q.GTID != "" {
		if flavor == mysql.MariaDBFlavor {
			ps, err1 := lastPerDomain(p.GTID)
			qs, err2 := lastPerDomain(q.GTID)
			if err1 == nil && err2 == nil {
				for domain, g := range qs {
					if at, ok := ps[domain]; !ok || at.SequenceNumber < g.SequenceNumber {
						return false
					}
				}
				return true
			}
		}
		ps, err1 := mysql.ParseGTIDSet(flavor, p.GTID)
		qs, err2 := mysql.ParseGTIDSet(flavor, q.GTID)
		if err1 == nil && err2 == nil {
			return ps.Contain(qs)
		}
	}
	if q.GTID == "" && q.File == "" {
		return true
	}
	return mysql.Position{Name: p.File, Pos: p.Pos}.Compare(mysql.Position{Name: q.File, Pos: q.Pos}) >= 0
}

// gtidPosition is the GTID set a replica starts from, of a set the log or
// the server gave. MariaDB takes one GTID per replication domain, the last
// one applied (as its gtid_slave_pos holds): a set with two GTIDs of one
// domain, as an event's set has once two server_ids wrote in the domain (a
// failover to a replica with another server_id), is refused with error
// 1943 "GTID 0-2-405 and 0-1-408 conflict (duplicate domain id 0)". Per
// domain the GTID with the highest sequence number is kept: sequence
// numbers grow within a domain whichever server writes (MariaDB, "Global
// Transaction ID", gtid_strict_mode). MySQL's sets (uuid:interval lists)
// and sets that do not parse are returned as they are.
func gtidPosition(flavor, set string) string {
	if flavor != mysql.MariaDBFlavor || set == "" {
		return set
	}
	last, err := lastPerDomain(set)
	if err != nil {
		return set
	}
	domains := make([]uint32, 0, len(last))
	for d := range last {
		domains = append(domains, d)
	}
	slices.Sort(domains)
	parts := make([]string, len(domains))
	for i, d := range domains {
		parts[i] = last[d].String()
	}
	return strings.Join(parts, ",")
}

// lastPerDomain is, per domain of a MariaDB GTID list, its GTID with the
// highest sequence number.
func lastPerDomain(set string) (map[uint32]*mysql.MariadbGTID, error) {
	parsed, err := mysql.ParseMariadbGTIDSet(set)
	if err != nil {
		return nil, err
	}
	last := map[uint32]*mysql.MariadbGTID{}
	for domain, servers := range parsed.(*mysql.MariadbGTIDSet).Sets {
		for _, g := range servers {
			if at, ok := last[domain]; !ok || g.SequenceNumber > at.SequenceNumber {
				last[domain] = g
			}
		}
	}
	return last, nil
}

// serverPosition is the end of the server's binary log now: the GTID set
// of every transaction logged (MariaDB's gtid_binlog_pos, MySQL's
// Executed_Gtid_Set) and the file and offset of SHOW MASTER STATUS (SHOW
// BINARY LOG STATUS on MySQL 8.4+).
func serverPosition(ctx context.Context, db *sql.DB, srv Server) (Position, error) {
	var p Position
	rows, err := db.QueryContext(ctx, "SHOW MASTER STATUS")
	if err != nil && srv.Flavor == mysql.MySQLFlavor {
		rows, err = db.QueryContext(ctx, "SHOW BINARY LOG STATUS")
	}
	if err != nil {
		return p, fmt.Errorf("read the server's binary log position: %w", err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return p, err
	}
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return p, err
		}
		return p, fmt.Errorf("%w: SHOW MASTER STATUS is empty: the binary log is off", ErrSettings)
	}
	vals := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return p, err
	}
	for i, c := range cols {
		switch strings.ToLower(c) {
		case "file":
			p.File = vals[i].String
		case "position":
			var n uint64
			fmt.Sscan(vals[i].String, &n)
			p.Pos = uint32(n)
		case "executed_gtid_set":
			if srv.GTID {
				p.GTID = strings.ReplaceAll(strings.TrimSpace(vals[i].String), "\n", "")
			}
		}
	}
	if err := rows.Close(); err != nil {
		return p, err
	}
	if srv.Flavor == mysql.MariaDBFlavor {
		if err := db.QueryRowContext(ctx, "SELECT @@gtid_binlog_pos").Scan(&p.GTID); err != nil {
			return p, fmt.Errorf("read the server's GTID position: %w", err)
		}
	}
	return p, nil
}

// storedPosition is the table's stored position; false when there is none.
// storedPosition is the table's stored position and when it was written
// (database clock, UTC); false when there is none.
func (s *Subscriber) storedPosition(ctx context.Context) (Position, time.Time, bool, error) {
	var p Position
	var pos int64
	var at string
	err := s.db.SQL.QueryRowContext(ctx, s.q.PositionRead).Scan(&p.GTID, &p.File, &pos, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return p, time.Time{}, false, nil
	}
	if err != nil {
		return p, time.Time{}, false, fmt.Errorf("read the binary log position of %s (%s_binlog; bridge migrate creates it): %w", s.cfg.Table, s.cfg.Table, err)
	}
	p.Pos = uint32(pos)
	if !s.srv.GTID {
		p.GTID = ""
	}
	written, _ := time.Parse(dbTimeLayout, at)
	return p, written, true, nil
}

// dbTimeLayout is how the relay's MySQL sessions return DATETIME(6).
const dbTimeLayout = "2006-01-02 15:04:05.999999"
