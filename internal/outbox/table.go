package outbox

import (
	"fmt"
	"strings"

	"github.com/outbox-bridge/bridge/internal/sqlname"
)

// tableName is a validated, optionally schema-qualified table name. It is
// written into SQL unquoted, so it follows the database's case folding.
type tableName struct {
	schema, name string
}

// ParseTableName validates name with sqlname.Check: an SQL identifier that
// every supported database takes unquoted, optionally qualified by a
// schema as "schema.table".
func ParseTableName(name string) (tableName, error) {
	if err := sqlname.Check(name); err != nil {
		return tableName{}, fmt.Errorf("table name: %w", err)
	}
	if schema, table, ok := strings.Cut(name, "."); ok {
		return tableName{schema: schema, name: table}, nil
	}
	return tableName{name: name}, nil
}

func (t tableName) String() string {
	if t.schema == "" {
		return t.name
	}
	return t.schema + "." + t.name
}
