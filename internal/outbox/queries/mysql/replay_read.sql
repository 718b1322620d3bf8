{{/* bridge replay: relayed (done) rows in id order; parameters as in
queries/postgres/replay_read.sql, each in turn. A plain consistent read: no
locking clause, so it neither waits on the relay's claims nor holds back its
marks. The status test as in queries/postgres/replay_read.sql: the primary key's
range in id order, not an index on status. */ -}}
SELECT id, idempotency_key, subject, payload, headers, ordering_key, created_at, COALESCE(stream, ''), COALESCE(stream_seq, 0)
FROM {{.Table}}
WHERE coalesce(status, '') = 'done' AND id > ? AND id <= ?
	AND created_at >= STR_TO_DATE(?, '%Y-%m-%dT%H:%i:%s.%fZ') AND created_at < STR_TO_DATE(?, '%Y-%m-%dT%H:%i:%s.%fZ')
	AND (? IS NULL OR ordering_key = ?) AND (? IS NULL OR stream = ?)
ORDER BY id LIMIT ?
