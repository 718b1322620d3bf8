package source

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/outbox"
)

// TestTableSetInheritsOnce: what the relay before left of a table is
// taken over by the table's first member only: a table let go and matched
// again later (a tenant dropped and made again) starts afresh, rather than
// going back to the old relay's counters and stall (a saboteur's run).
func TestTableSetInheritsOnce(t *testing.T) {
	ctx := context.Background()
	url, _, _ := bridgetest.Outbox(t, "sqlite")
	db, err := outbox.Open(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	const table = "ts_a_outbox" // matched by the pattern ts_*_outbox
	_, err = outbox.Migrate(ctx, db, table)
	require.NoError(t, err)
	type member struct {
		table     string
		count     int
		inherited bool
	}
	var last *member
	newSet := func(stores []*outbox.Store) *TableSet[*member, int] {
		var s *TableSet[*member, int]
		s = NewTableSet(db, []string{"ts_*_outbox"}, time.Hour, stores, nil, slog.New(slog.DiscardHandler), TableHooks[*member, int]{
			Table: func(m *member) string { return m.table },
			Parts: func(m *member) int { return m.count },
			Add: func(_ context.Context, store *outbox.Store, _ bool) {
				m := &member{table: store.Table()}
				s.Admit(store.Table(), m, func(prev int, ok bool) { m.count, m.inherited = prev, ok })
				last = m
			},
			LetGo: func(*member) {},
		})
		return s
	}
	store, err := outbox.OpenStore(ctx, db, table, slog.New(slog.DiscardHandler))
	require.NoError(t, err)

	first := newSet([]*outbox.Store{store})
	first.Start(ctx)
	last.count = 10
	first.Close()

	second := newSet([]*outbox.Store{store})
	second.Inherit(first)
	second.Start(ctx)
	require.True(t, last.inherited)
	require.Equal(t, 10, last.count, "the first member takes over what the relay before counted")

	for _, q := range []string{"DROP TABLE " + table, "DROP TABLE " + table + "_migrations"} {
		_, err := db.SQL.ExecContext(ctx, q)
		require.NoError(t, err)
	}
	second.resolve(ctx)
	require.Empty(t, second.Tables(), "the dropped table let go")
	_, err = outbox.Migrate(ctx, db, table)
	require.NoError(t, err)
	second.resolve(ctx)
	require.Equal(t, []string{table}, second.Tables())
	require.False(t, last.inherited, "matched again, the table starts afresh")
	require.Zero(t, last.count)
}
