{{/* The WAL source's sweep: which of the ids $1 are still pending or failed. */ -}}
SELECT id FROM {{.Table}} WHERE id = ANY($1) AND status IN ('pending', 'failed')
