UPDATE {{.Table}} SET status = 'pending', attempts = 0, owner = NULL, available_at = now()
WHERE status = 'permanent_failed'
