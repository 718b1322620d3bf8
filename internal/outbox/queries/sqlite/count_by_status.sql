SELECT status, count(*), min(created_at), {{template "now"}} FROM {{.Table}} GROUP BY status
