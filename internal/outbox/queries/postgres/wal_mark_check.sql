{{/*
The WAL source, after a mark changed fewer rows than it named: one
statement, one snapshot: the snapshot, which of the rows $1 it sees and
which of those are unsettled (comma-separated ids).
*/ -}}
SELECT pg_current_snapshot()::text,
	coalesce((SELECT string_agg(o.id::text, ',') FROM {{.Table}} o WHERE o.id = ANY($1)), ''),
	coalesce((SELECT string_agg(o.id::text, ',') FROM {{.Table}} o WHERE o.id = ANY($1) AND {{template "wal_unsettled" "o"}}), '')
