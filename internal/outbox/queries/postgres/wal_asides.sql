{{/* The WAL source: the failed rows of ordering keys (set aside by an earlier run), in id order; the seconds until each is due (negative: due). */ -}}
SELECT id, ordering_key, coalesce(last_error, ''), extract(epoch FROM available_at - now())::float8 FROM {{.Table}}
WHERE ordering_key IS NOT NULL AND status = 'failed' ORDER BY id
