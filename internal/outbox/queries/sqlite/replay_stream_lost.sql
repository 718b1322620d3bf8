{{/* See queries/postgres/replay_stream_lost.sql. */ -}}
SELECT count(*) FROM {{.Table}}
WHERE status = 'done' AND stream = ?1 AND (stream_seq < ?2 OR stream_seq > ?3)
