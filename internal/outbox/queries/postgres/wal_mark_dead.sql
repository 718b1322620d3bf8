{{/* The WAL source: dead letters. Per row: ids $1, errors $2, attempts $3. The ids changed. */ -}}
UPDATE {{.Table}} o SET status = 'permanent_failed', last_error = m.err, attempts = m.attempts, owner = NULL
FROM unnest($1::bigint[], $2::text[], $3::int[]) AS m(id, err, attempts)
{{template "wal_lookup" .}} RETURNING o.id
