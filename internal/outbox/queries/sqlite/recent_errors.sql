SELECT id, status, attempts, last_error FROM {{.Table}} WHERE status IN ('failed', 'permanent_failed') ORDER BY id DESC LIMIT ?
