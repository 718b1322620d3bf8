{{/* See queries/postgres/replay_stream_sample.sql. */ -}}
SELECT id, idempotency_key, stream_seq FROM {{.Table}}
WHERE status = 'done' AND stream = ?1 AND stream_seq >= ?2 AND stream_seq <= ?3
ORDER BY id LIMIT 1
