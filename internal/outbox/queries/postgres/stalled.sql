{{/* Whether a row has been claimable for more than $1 microseconds: rows
without an ordering key from the unordered index, the others from the
ordering index (migration 00005 dropped the index of claimable rows). */ -}}
SELECT EXISTS (SELECT 1 FROM {{.Table}} o WHERE o.ordering_key IS NULL AND o.status IN ('pending', 'failed')
	AND o.available_at < now() - $1 * interval '1 microsecond')
	OR EXISTS (SELECT 1 FROM {{.Table}} o WHERE o.ordering_key IS NOT NULL AND o.status IN ('pending', 'failed')
	AND o.available_at < now() - $1 * interval '1 microsecond'
	AND NOT EXISTS (SELECT 1 FROM {{.Table}} e WHERE e.ordering_key = o.ordering_key AND e.id < o.id AND {{template "unsettled"}}))
