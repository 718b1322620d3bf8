{{/* Up to $2 done rows relayed more than $1 microseconds ago. */ -}}
DELETE FROM {{.Table}} WHERE id IN (
	SELECT id FROM {{.Table}} WHERE status = 'done' AND relayed_at < now() - $1 * interval '1 microsecond' LIMIT $2)
