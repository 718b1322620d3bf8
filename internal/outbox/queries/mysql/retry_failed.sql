{{/* The failed rows among the ids (a JSON array) become claimable now, attempts kept. */ -}}
UPDATE {{.Table}} o JOIN JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$')) AS j ON o.id = j.id
SET o.available_at = {{template "now"}} WHERE o.status = 'failed'
