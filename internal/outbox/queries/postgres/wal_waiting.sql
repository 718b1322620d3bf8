{{/* The WAL source's stall watch: the oldest $2 rows, by id, pending or failed whose available_at is more than $1 microseconds ago. */ -}}
SELECT id FROM {{.Table}}
WHERE status IN ('pending', 'failed') AND available_at < now() - $1 * interval '1 microsecond' ORDER BY id LIMIT $2
