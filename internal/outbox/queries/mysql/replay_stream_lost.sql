{{/* See queries/postgres/replay_stream_lost.sql. */ -}}
SELECT count(*) FROM {{.Table}}
WHERE status = 'done' AND stream = ? AND (stream_seq < ? OR stream_seq > ?)
