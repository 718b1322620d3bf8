{{/* bridge replay: relayed (done) rows in id order; parameters as in
queries/postgres/replay_read.sql. Times are compared as stored (RFC 3339
text, milliseconds). The status test as in queries/postgres/replay_read.sql: the primary key's
range in id order, not an index on status. */ -}}
SELECT id, idempotency_key, subject, payload, headers, ordering_key, created_at, COALESCE(stream, ''), COALESCE(stream_seq, 0)
FROM {{.Table}}
WHERE coalesce(status, '') = 'done' AND id > ?1 AND id <= ?2
	AND created_at >= strftime('%Y-%m-%dT%H:%M:%fZ', ?3) AND created_at < strftime('%Y-%m-%dT%H:%M:%fZ', ?4)
	AND (?5 IS NULL OR ordering_key = ?6) AND (?7 IS NULL OR stream = ?8)
ORDER BY id LIMIT ?9
