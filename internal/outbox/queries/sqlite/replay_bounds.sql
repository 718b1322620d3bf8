{{/* See queries/postgres/replay_bounds.sql; parameters as in replay_read.sql. */ -}}
SELECT count(*), COALESCE(max(id), 0)
FROM {{.Table}}
WHERE status = 'done' AND id > ?1 AND id <= ?2
	AND created_at >= strftime('%Y-%m-%dT%H:%M:%fZ', ?3) AND created_at < strftime('%Y-%m-%dT%H:%M:%fZ', ?4)
	AND (?5 IS NULL OR ordering_key = ?6) AND (?7 IS NULL OR stream = ?8)
