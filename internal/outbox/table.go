package outbox

import (
	"fmt"
	"regexp"
	"strings"
)

var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// tableName is a validated, optionally schema-qualified table name. It is
// written into SQL unquoted, so it follows the database's case folding.
type tableName struct {
	schema, name string
}

// ParseTableName validates name: an SQL identifier (letter or underscore,
// then letters, digits, underscores; at most 63 bytes), optionally
// qualified by a schema as "schema.table".
func ParseTableName(name string) (tableName, error) {
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return tableName{}, fmt.Errorf("table name %q: at most one dot (schema.table) is allowed", name)
	}
	for _, p := range parts {
		if !identifier.MatchString(p) {
			return tableName{}, fmt.Errorf("table name %q: %q is not an SQL identifier (a letter or _, then letters, digits or _, at most 63 bytes), optionally schema-qualified as schema.table", name, p)
		}
	}
	if len(parts) == 2 {
		return tableName{schema: parts[0], name: parts[1]}, nil
	}
	return tableName{name: parts[0]}, nil
}

func (t tableName) String() string {
	if t.schema == "" {
		return t.name
	}
	return t.schema + "." + t.name
}
