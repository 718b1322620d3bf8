SELECT id, subject, attempts, last_error, created_at, {{template "now"}} FROM {{.Table}} WHERE status = 'failed' ORDER BY id LIMIT 1
