{{/* The WAL source: which of the ids $1 are still failed. */ -}}
SELECT id FROM {{.Table}} WHERE id = ANY($1) AND status = 'failed'
