{{/* The WAL source: retryable failures. Per row: ids $1, errors $2, attempts $3, backoff $4 (microseconds), first publish $5. The ids changed. */ -}}
UPDATE {{.Table}} o SET status = 'failed', last_error = m.err, attempts = m.attempts, owner = NULL,
	available_at = now() + m.delay * interval '1 microsecond', first_claimed_at = coalesce(o.first_claimed_at, m.first)
FROM unnest($1::bigint[], $2::text[], $3::int[], $4::bigint[], $5::timestamptz[]) AS m(id, err, attempts, delay, first)
{{template "wal_lookup" .}} RETURNING o.id
