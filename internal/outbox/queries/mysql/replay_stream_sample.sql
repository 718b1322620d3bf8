{{/* See queries/postgres/replay_stream_sample.sql. */ -}}
SELECT id, idempotency_key, stream_seq FROM {{.Table}}
WHERE status = 'done' AND stream = ? AND stream_seq >= ? AND stream_seq <= ?
ORDER BY id LIMIT 1
