SELECT status, COUNT(*), MIN(created_at), {{template "now"}} FROM {{.Table}} GROUP BY status
