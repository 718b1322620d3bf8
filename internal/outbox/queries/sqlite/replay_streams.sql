{{/* See queries/postgres/replay_streams.sql. */ -}}
SELECT stream, count(*), min(stream_seq), max(stream_seq)
FROM {{.Table}}
WHERE status = 'done' AND stream IS NOT NULL AND stream <> '' AND stream_seq IS NOT NULL
GROUP BY stream ORDER BY stream
