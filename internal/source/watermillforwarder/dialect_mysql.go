package watermillforwarder

import (
	"context"

	wmsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"

	"github.com/outbox-bridge/bridge/internal/outbox"
)

// mysqlDialect reads with DefaultMySQLSchema and DefaultMySQLOffsetsAdapter
// (MySQL and MariaDB): tables `watermill_<topic>` and
// `watermill_offsets_<topic>` in the URL's database.
type mysqlDialect struct{}

func (mysqlDialect) adapters(batchSize int) (wmsql.SchemaAdapter, wmsql.OffsetsAdapter) {
	return wmsql.DefaultMySQLSchema{SubscribeBatchSize: batchSize}, wmsql.DefaultMySQLOffsetsAdapter{}
}

func (mysqlDialect) tableExists(ctx context.Context, db *outbox.DB, table string) (bool, error) {
	var n int
	err := db.SQL.QueryRowContext(ctx,
		`SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?`, table).Scan(&n)
	return n > 0, err
}

func (d mysqlDialect) createOffsetsTable(ctx context.Context, db *outbox.DB, topic string) error {
	_, offsets := d.adapters(1)
	queries, err := offsets.SchemaInitializingQueries(wmsql.OffsetsSchemaInitializingQueriesParams{Topic: topic})
	if err != nil {
		return err
	}
	for _, q := range queries {
		if _, err := db.SQL.ExecContext(ctx, q.Query, q.Args...); err != nil {
			return err
		}
	}
	return nil
}
