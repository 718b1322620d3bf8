{{/* The failed rows among the ids $1 become claimable now, attempts kept. */ -}}
UPDATE {{.Table}} SET available_at = now() WHERE status = 'failed' AND id = ANY($1)
