package main

import (
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLogSourceReadyzNamesATableRenamedAway: the outbox table renamed
// under a running relay of a log source is named on /readyz (503) by the
// next sweep: its rows in the log no longer name it (mysql-binlog) or
// cannot be marked, and nothing else fails while none come. Renamed back,
// the relay is ready and relays again.
func TestLogSourceReadyzNamesATableRenamedAway(t *testing.T) {
	t.Parallel()
	for _, source := range []string{"postgres-wal", "mysql-binlog"} {
		t.Run(source, func(t *testing.T) {
			t.Parallel()
			var (
				db                     *sql.DB
				dir, table             string
				env                    []string
				renameAway, renameBack string
			)
			if source == "postgres-wal" {
				e := newWALEnv(t)
				db, dir, table, env = e.db, e.dir, e.table, e.env()
				schema, name, _ := strings.Cut(e.table, ".")
				renameAway = fmt.Sprintf("ALTER TABLE %s RENAME TO %s_away", e.table, name)
				renameBack = fmt.Sprintf("ALTER TABLE %s.%s_away RENAME TO %s", schema, name, name)
			} else {
				e := newBinlogEnv(t)
				db, dir, table, env = e.db, e.dir, e.table, e.env()
				renameAway = fmt.Sprintf("RENAME TABLE %s TO %s_away", e.table, e.table)
				renameBack = fmt.Sprintf("RENAME TABLE %s_away TO %s", e.table, e.table)
			}
			http := fmt.Sprintf("127.0.0.1:%d", freePort(t))
			p := start(t, dir, append(env, "BRIDGE_HTTP_LISTEN="+http, "BRIDGE_WAL_SWEEP_INTERVAL=1s", "BRIDGE_BINLOG_SWEEP_INTERVAL=1s"), "run")
			readyIs := func(want int, body string) {
				t.Helper()
				var got []string // the last answer, for the message
				poll(t, 30*time.Second, func() bool {
					require.False(t, p.exited(), "relay exited:\n%s", p.stderr)
					code, b := readyz(http)
					got = []string{strconv.Itoa(code), b}
					return code == want && strings.Contains(b, body)
				}, "readyz never answered %d with %q: %v", want, body, &got)
			}
			readyIs(200, "")
			_, err := db.Exec(renameAway)
			require.NoError(t, err)
			readyIs(503, "outbox table "+table+" not found")
			_, err = db.Exec(renameBack)
			require.NoError(t, err)
			readyIs(200, "")
			_, err = db.Exec(`INSERT INTO ` + table + ` (idempotency_key, subject, payload) VALUES ('back', 'events.back', 'back')`)
			require.NoError(t, err)
			poll(t, 30*time.Second, func() bool {
				var status string
				_ = db.QueryRow(`SELECT status FROM ` + table + ` WHERE idempotency_key = 'back'`).Scan(&status)
				return status == "done"
			}, "the row after the table came back was never relayed")
		})
	}
}
