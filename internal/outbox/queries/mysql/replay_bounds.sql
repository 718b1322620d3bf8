{{/* See queries/postgres/replay_bounds.sql; parameters as in replay_read.sql. */ -}}
SELECT count(*), COALESCE(max(id), 0)
FROM {{.Table}}
WHERE status = 'done' AND id > ? AND id <= ?
	AND created_at >= STR_TO_DATE(?, '%Y-%m-%dT%H:%i:%s.%fZ') AND created_at < STR_TO_DATE(?, '%Y-%m-%dT%H:%i:%s.%fZ')
	AND (? IS NULL OR ordering_key = ?) AND (? IS NULL OR stream = ?)
