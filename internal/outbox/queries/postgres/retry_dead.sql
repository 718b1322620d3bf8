{{/* The dead letters among the ids $1 get a fresh start. */ -}}
UPDATE {{.Table}} SET status = 'pending', attempts = 0, owner = NULL, available_at = now()
WHERE status = 'permanent_failed' AND id = ANY($1)
