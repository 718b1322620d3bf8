{{/* Up to the limit (second parameter) done rows relayed more than the first parameter's microseconds ago. */ -}}
DELETE FROM {{.Table}} WHERE status = 'done' AND relayed_at < {{template "now"}} - INTERVAL ? MICROSECOND LIMIT ?
