{{/* Whether a row has been claimable for more than the parameter's microseconds. */ -}}
SELECT EXISTS (SELECT 1 FROM {{.Table}} o WHERE o.status IN ('pending', 'failed')
	AND o.available_at < {{template "now"}} - INTERVAL ? MICROSECOND
	AND NOT EXISTS (SELECT 1 FROM {{.Table}} e WHERE e.ordering_key = o.ordering_key AND e.id < o.id AND e.status IN ('pending', 'in_flight', 'failed')))
