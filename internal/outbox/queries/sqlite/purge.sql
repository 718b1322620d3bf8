{{/* Up to the limit (second parameter) done rows relayed before now plus the (negative) seconds of the first. */ -}}
DELETE FROM {{.Table}} WHERE id IN (
	SELECT id FROM {{.Table}} WHERE status = 'done' AND relayed_at < {{template "now_plus"}} LIMIT ?)
