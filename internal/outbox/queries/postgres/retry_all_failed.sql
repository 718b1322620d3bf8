UPDATE {{.Table}} SET available_at = now() WHERE status = 'failed'
