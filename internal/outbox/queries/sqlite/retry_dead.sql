{{/* The dead letters among the ids (a JSON array) get a fresh start. */ -}}
UPDATE {{.Table}} SET status = 'pending', attempts = 0, owner = NULL, available_at = {{template "now"}}
WHERE status = 'permanent_failed' AND id IN (SELECT value FROM json_each(?))
