UPDATE {{.Table}} SET status = 'pending', attempts = 0, owner = NULL, available_at = {{template "now"}}
WHERE status = 'permanent_failed'
