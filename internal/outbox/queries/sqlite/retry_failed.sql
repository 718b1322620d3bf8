{{/* The failed rows among the ids (a JSON array) become claimable now, attempts kept. */ -}}
UPDATE {{.Table}} SET available_at = {{template "now"}} WHERE status = 'failed' AND id IN (SELECT value FROM json_each(?))
