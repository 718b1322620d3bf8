{{/* The WAL source: rows done after their PubAck. Per row: ids $1, streams $2, stream sequences $3, attempts $4. The ids changed. */ -}}
UPDATE {{.Table}} o SET status = 'done', relayed_at = now(), owner = NULL, last_error = NULL,
	stream = m.stream, stream_seq = m.seq, attempts = m.attempts
FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::int[]) AS m(id, stream, seq, attempts)
{{template "wal_lookup" .}} RETURNING o.id
