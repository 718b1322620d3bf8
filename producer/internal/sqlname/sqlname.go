// Package sqlname checks the table names the relay and the producer
// accept. A table name is written into SQL unquoted and several names are
// derived from it (indexes, the migrations table), so it must be an
// identifier every supported database takes as it is.
package sqlname

import (
	"fmt"
	"regexp"
	"strings"
)

// Limits on the parts of a table name, in bytes.
const (
	// TableMax leaves room for the longest derived name, the index
	// <table>_claimable_idx, within PostgreSQL's 63 bytes (NAMEDATALEN-1;
	// longer names are truncated, and two truncated index names collide).
	TableMax = 63 - len("_claimable_idx")
	// SchemaMax is PostgreSQL's identifier limit.
	SchemaMax = 63
)

// Rule says in words what Check accepts, for error messages.
const Rule = "an SQL identifier (a letter or _, then letters, digits or _; the table at most 49 bytes, " +
	"a schema at most 63; not a reserved word of PostgreSQL, MySQL/MariaDB or SQLite; the table not ending in _migrations), optionally schema-qualified as schema.table"

// MigrationsSuffix ends the name of the table that holds an outbox's schema
// version, <table>_migrations; no table name may end in it.
const MigrationsSuffix = "_migrations"

var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Check returns nil when name is an acceptable table name, "table" or
// "schema.table", and otherwise an error saying which part is wrong and why.
func Check(name string) error {
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return fmt.Errorf("%q has more than one dot; give table or schema.table", name)
	}
	for i, p := range parts {
		what, max := "", TableMax
		if len(parts) == 2 {
			what = fmt.Sprintf("table %q of ", p)
			if i == 0 {
				what, max = fmt.Sprintf("schema %q of ", p), SchemaMax
			}
		}
		switch {
		case !identifier.MatchString(p):
			return fmt.Errorf("%s%q is not an SQL identifier (a letter or _, then letters, digits or _)", what, name)
		case len(p) > max:
			return fmt.Errorf("%s%q is %d bytes; at most %d (names derived from it must fit PostgreSQL's 63)", what, name, len(p), max)
		case reserved[strings.ToLower(p)]:
			return fmt.Errorf("%s%q is a reserved word in SQL (PostgreSQL, MySQL/MariaDB or SQLite); choose another name", what, name)
		case i == len(parts)-1 && strings.HasSuffix(strings.ToLower(p), MigrationsSuffix):
			return fmt.Errorf("%s%q ends in %s, as the table of each outbox's schema version is named (<table>%s): "+
				"the name would be taken by, or take, another outbox's version table; choose another name", what, name, MigrationsSuffix, MigrationsSuffix)
		}
	}
	return nil
}

// reserved holds the words that PostgreSQL 15, MariaDB 10.11 or SQLite
// (modernc.org/sqlite v1.62) refuse as an unquoted table name, found by
// trying every keyword the first two list (pg_get_keywords(),
// information_schema.KEYWORDS) and SQLite's own in CREATE TABLE and in
// the statements the relay runs; and every word MySQL 8.0 and 8.4 mark
// reserved, (R), in their manuals ("Keywords and Reserved Words",
// https://dev.mysql.com/doc/refman/8.0/en/keywords.html and
// https://dev.mysql.com/doc/refman/8.4/en/keywords.html; ARRAY was
// reserved in 8.0.17 and 8.0.18 only; MANUAL, PARALLEL, QUALIFY and
// TABLESAMPLE are reserved from 8.4), which the table names of the
// supported MySQL versions (8.0.16+) must avoid: rank, groups, system, row
// passed the check and failed at migrate on MySQL 8.
var reserved = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(reservedWords) {
		m[w] = true
	}
	return m
}()

const reservedWords = `
accessible add all alter analyse analyze and any array as asc asensitive
asymmetric authorization autoincrement before between bigint binary blob
both by call cascade case cast change char character check collate
collation column commit concurrently condition constraint continue convert
create cross cube cume_dist current_catalog current_date current_role
current_schema current_time current_timestamp current_user cursor database
databases day_hour day_microsecond day_minute day_second dec decimal
declare default deferrable delayed delete delete_domain_id dense_rank desc
describe deterministic distinct distinctrow div do do_domain_ids double
drop dual each else elseif empty enclosed end escape escaped except exists
exit explain false fetch first_value float float4 float8 for force foreign
freeze from full fulltext function generated get grant group grouping
groups having high_priority hour_microsecond hour_minute hour_second if
ignore ignore_domain_ids ilike in index infile initially inner inout
insensitive insert int int1 int2 int3 int4 int8 integer intersect interval
into io_after_gtids io_before_gtids is isnull iterate join json_table key
keys kill lag last_value lateral lead leading leave left like limit linear
lines load localtime localtimestamp lock long longblob longtext loop
low_priority manual master_bind master_demote_to_replica
master_demote_to_slave master_ssl_verify_server_cert match maxvalue
mediumblob mediumint mediumtext middleint minute_microsecond minute_second
mod modifies natural no_write_to_binlog not nothing notnull nth_value ntile
null numeric of offset on only optimize optimizer_costs option optionally
or order out outer outfile over overlaps page_checksum parallel
parse_vcol_expr partition percent_rank placing portion precision primary
procedure purge qualify range rank read read_write reads real recursive
ref_system_id references regexp release rename repeat replace require
resignal restrict return returning revoke right rlike row row_number rows
schema schemas second_microsecond select sensitive separator session_user
set show signal similar smallint some spatial specific sql sql_big_result
sql_calc_found_rows sql_small_result sqlexception sqlstate sqlwarning ssl
starting stats_auto_recalc stats_persistent stats_sample_pages stored
straight_join symmetric system table tablesample terminated then tinyblob
tinyint tinytext to trailing transaction trigger true undo union unique
unlock unsigned update usage use user using utc_date utc_time utc_timestamp
values varbinary varchar varcharacter variadic varying verbose virtual when
where while window with write xor year_month zerofill
`
