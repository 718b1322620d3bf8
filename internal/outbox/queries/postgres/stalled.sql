{{/* Whether a row has been claimable for more than $1 microseconds. */ -}}
SELECT EXISTS (SELECT 1 FROM {{.Table}} o WHERE o.status IN ('pending', 'failed')
	AND o.available_at < now() - $1 * interval '1 microsecond'
	AND NOT EXISTS (SELECT 1 FROM {{.Table}} e WHERE e.ordering_key = o.ordering_key AND e.id < o.id AND {{template "unsettled"}}))
