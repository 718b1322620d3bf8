{{/* Whether a row has been claimable since before now plus the (negative) seconds of the parameter. */ -}}
SELECT EXISTS (SELECT 1 FROM {{.Table}} o WHERE o.status IN ('pending', 'failed')
	AND o.available_at < {{template "now_plus"}}
	AND NOT EXISTS (SELECT 1 FROM {{.Table}} e WHERE e.ordering_key = o.ordering_key AND e.id < o.id AND {{template "unsettled"}}))
