package mysqlbinlog

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/stretchr/testify/require"
)

func TestPositionCovers(t *testing.T) {
	for _, c := range []struct {
		p, q   Position
		flavor string
		want   bool
	}{
		{Position{GTID: "0-1-10"}, Position{GTID: "0-1-9"}, gomysql.MariaDBFlavor, true},
		{Position{GTID: "0-1-10"}, Position{GTID: "0-1-10"}, gomysql.MariaDBFlavor, true},
		{Position{GTID: "0-1-9"}, Position{GTID: "0-1-10"}, gomysql.MariaDBFlavor, false},
		{Position{GTID: "0-1-10,1-2-5"}, Position{GTID: "1-2-6"}, gomysql.MariaDBFlavor, false},
		{Position{GTID: "0-1-10,1-2-7"}, Position{GTID: "0-1-3,1-2-6"}, gomysql.MariaDBFlavor, true},
		// Another server wrote in the domain (a failover): by sequence.
		{Position{GTID: "0-2-11"}, Position{GTID: "0-1-10"}, gomysql.MariaDBFlavor, true},
		{Position{GTID: "0-2-9"}, Position{GTID: "0-1-10"}, gomysql.MariaDBFlavor, false},
		{Position{GTID: "0-1-408,0-2-405"}, Position{GTID: "0-1-408"}, gomysql.MariaDBFlavor, true},
		// MySQL's sets: server_uuid:intervals, one per server that wrote.
		{Position{GTID: "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-10"}, Position{GTID: "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-9"}, gomysql.MySQLFlavor, true},
		{Position{GTID: "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-9"}, Position{GTID: "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-10"}, gomysql.MySQLFlavor, false},
		// A failover: the promoted replica's set holds both servers'.
		{Position{GTID: "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-10,4f22ab58-71ca-11e1-9e33-c80aa9429562:1-3"}, Position{GTID: "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-10"}, gomysql.MySQLFlavor, true},
		{Position{GTID: "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-10"}, Position{GTID: "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-10,4f22ab58-71ca-11e1-9e33-c80aa9429562:1"}, gomysql.MySQLFlavor, false},
		// A gap (a transaction not applied) is not covered.
		{Position{GTID: "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-4:6-10"}, Position{GTID: "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5"}, gomysql.MySQLFlavor, false},
		// File and offset where either has no GTID set.
		{Position{File: "binlog.000002", Pos: 4}, Position{File: "binlog.000001", Pos: 900}, gomysql.MySQLFlavor, true},
		{Position{File: "binlog.000001", Pos: 4}, Position{File: "binlog.000001", Pos: 900}, gomysql.MySQLFlavor, false},
		{Position{File: "binlog.000001", Pos: 4}, Position{}, gomysql.MySQLFlavor, true},
	} {
		require.Equal(t, c.want, c.p.covers(c.q, c.flavor), "%s covers %s", c.p, c.q)
	}
}

// TestGTIDPositionOnePerDomain: MariaDB refuses a start position with two
// GTIDs of one domain (error 1943), which an event's set holds once two
// server_ids wrote there; the highest sequence of each domain is kept.
func TestGTIDPositionOnePerDomain(t *testing.T) {
	for set, want := range map[string]string{
		"0-1-408,0-2-405":   "0-1-408",
		"0-2-405,0-1-408":   "0-1-408",
		"0-1-3,0-2-9,1-5-7": "0-2-9,1-5-7",
		"1-5-7,0-1-3":       "0-1-3,1-5-7",
		"0-1-10":            "0-1-10",
		"":                  "",
		"not a gtid":        "not a gtid",
	} {
		require.Equal(t, want, gtidPosition(gomysql.MariaDBFlavor, set), set)
	}
	mysqlSet := "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5"
	require.Equal(t, mysqlSet, gtidPosition(gomysql.MySQLFlavor, mysqlSet))
}

func TestDeriveServerID(t *testing.T) {
	a, b := DeriveServerID("app.outbox"), DeriveServerID("billing.outbox")
	require.NotEqual(t, a, b, "two tables, two server ids")
	require.Equal(t, a, DeriveServerID("app.outbox"), "stable")
	for _, id := range []uint32{a, b} {
		require.GreaterOrEqual(t, id, uint32(1_000_000_000))
		require.Less(t, id, uint32(2_000_000_000))
	}
}

func TestLockNameFitsMySQL(t *testing.T) {
	require.Equal(t, "outbox-bridge/binlog/app.outbox", lockName("app", "outbox"))
	long := lockName(strings.Repeat("s", 64), strings.Repeat("t", 64))
	require.LessOrEqual(t, len(long), 64, "MySQL refuses lock names over 64 characters")
	require.NotEqual(t, long, lockName(strings.Repeat("s", 64), strings.Repeat("u", 64)))
}

func TestPurgedIsTheServersRefusal(t *testing.T) {
	refusal := gomysql.NewError(gomysql.ER_MASTER_FATAL_ERROR_READING_BINLOG,
		"Could not find GTID state requested by slave in any binlog files. Probably the slave state is too old and required binlog files have been purged.")
	require.True(t, purged(refusal))
	require.True(t, purged(fmt.Errorf("session: %w", refusal)), "wrapped")
	require.False(t, purged(gomysql.NewError(gomysql.ER_MASTER_FATAL_ERROR_READING_BINLOG, "binlog truncated in the middle of event")))
	require.False(t, purged(errors.New("Could not find GTID state: purged")), "text alone is not the server's refusal")
}
