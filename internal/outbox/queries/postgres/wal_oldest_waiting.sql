{{/* The WAL source: the age in seconds of the oldest row pending or failed; no row when none is. */ -}}
SELECT extract(epoch FROM now() - created_at)::float8 FROM {{.Table}}
WHERE status IN ('pending', 'failed') ORDER BY id LIMIT 1
