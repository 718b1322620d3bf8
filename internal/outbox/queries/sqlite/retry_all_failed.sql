UPDATE {{.Table}} SET available_at = {{template "now"}} WHERE status = 'failed'
