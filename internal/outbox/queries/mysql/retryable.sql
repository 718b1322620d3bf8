SELECT id, subject, status FROM {{.Table}} WHERE status IN ('failed', 'permanent_failed') ORDER BY id
