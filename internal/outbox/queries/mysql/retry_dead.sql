{{/* The dead letters among the ids (a JSON array, read with JSON_TABLE) get a fresh start. */ -}}
UPDATE {{.Table}} o JOIN JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$')) AS j ON o.id = j.id
SET status = 'pending', attempts = 0, owner = NULL, available_at = {{template "now"}} WHERE o.status = 'permanent_failed'
