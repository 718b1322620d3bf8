package sqlname_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/producer/internal/sqlname"
)

func TestCheck(t *testing.T) {
	for _, ok := range []string{"outbox", "app.outbox", "_x", "Outbox_2", strings.Repeat("t", 49), strings.Repeat("s", 63) + ".t", "status", "events"} {
		require.NoError(t, sqlname.Check(ok), ok)
	}
	for _, tc := range []struct{ name, want string }{
		{"", "not an SQL identifier"},
		{"out-box", `"out-box" is not an SQL identifier`},
		{"1outbox", "not an SQL identifier"},
		{"a.b.c", "more than one dot"},
		{"a.", `table "" of "a." is not`},
		{".a", `schema "" of ".a" is not`},
		{"x;drop", "not an SQL identifier"},
		{strings.Repeat("t", 50), "is 50 bytes; at most 49"},
		{strings.Repeat("s", 64) + ".t", "is 64 bytes; at most 63"},
		{"select", `"select" is a reserved word`},
		{"Order", `"Order" is a reserved word`},
		{"user.outbox", `schema "user" of "user.outbox" is a reserved word`},
		{"app.key", `table "key" of "app.key" is a reserved word`},
		// MySQL 8's reserved words (its manual's (R)), which MariaDB takes.
		{"rank", `"rank" is a reserved word`},
		{"app.groups", `table "groups" of "app.groups" is a reserved word`},
		{"system", "reserved word"},
		{"row", "reserved word"},
		{"json_table", "reserved word"},
		{"Virtual", "reserved word"},
		{"qualify", "reserved word"},
		// The schema version of table t is in t_migrations.
		{"shop_outbox_migrations", `ends in _migrations`},
		{"app.Foo_Migrations", `table "Foo_Migrations" of "app.Foo_Migrations" ends in _migrations`},
	} {
		err := sqlname.Check(tc.name)
		require.Error(t, err, tc.name)
		require.Contains(t, err.Error(), tc.want, tc.name)
	}
}
