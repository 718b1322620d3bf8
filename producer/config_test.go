package producer_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/producer"
)

func TestNewDefaults(t *testing.T) {
	t.Parallel()
	w, err := producer.New(producer.Config{})
	require.NoError(t, err)
	require.Equal(t, producer.TableDefault, w.Table())
	require.Equal(t, "outbox", w.Table())
	require.Equal(t, producer.DialectDefault, w.Dialect())
	require.Equal(t, producer.Postgres, w.Dialect())
}

func TestNewAcceptsQualifiedTables(t *testing.T) {
	t.Parallel()
	for _, table := range []string{"outbox", "_outbox", "app.outbox", "App_1.Outbox_2", strings.Repeat("b", 49), strings.Repeat("a", 63) + "." + strings.Repeat("b", 49)} {
		for _, d := range []producer.Dialect{producer.Postgres, producer.MySQL, producer.SQLite} {
			w, err := producer.New(producer.Config{Table: table, Dialect: d})
			require.NoError(t, err, "%s on %s", table, d)
			require.Equal(t, table, w.Table())
			require.Equal(t, d, w.Dialect())
		}
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  producer.Config
		want string
	}{
		{producer.Config{Table: "out-box"}, `invalid config: Table: "out-box" is not an SQL identifier`},
		{producer.Config{Table: "a.b.c"}, `invalid config: Table: "a.b.c"`},
		{producer.Config{Table: "1outbox"}, `invalid config: Table: "1outbox"`},
		{producer.Config{Table: "outbox; DROP TABLE x"}, `invalid config: Table:`},
		{producer.Config{Table: ".outbox"}, `invalid config: Table:`},
		{producer.Config{Table: "app."}, `invalid config: Table:`},
		{producer.Config{Table: `"outbox"`}, `invalid config: Table:`},
		{producer.Config{Table: strings.Repeat("b", 50)}, `invalid config: Table: "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb" is 50 bytes; at most 49`},
		{producer.Config{Table: "order"}, `invalid config: Table: "order" is a reserved word`},
		{producer.Config{Dialect: "oracle"}, `invalid config: Dialect: "oracle" is not one of "postgres", "mysql", "sqlite"`},
		{producer.Config{Dialect: "Postgres"}, `invalid config: Dialect: "Postgres"`},
		{producer.Config{MaxPayload: -1}, `invalid config: MaxPayload: -1`},
	} {
		w, err := producer.New(tc.cfg)
		require.Error(t, err, "%+v", tc.cfg)
		require.Nil(t, w)
		require.ErrorContains(t, err, tc.want)
		require.ErrorIs(t, err, producer.ErrInvalidConfig, "%+v", tc.cfg)
	}
}
