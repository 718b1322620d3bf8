{{/*
The $2-th ordering key with unsettled rows after the key $1, or no row when
fewer follow (see jumpKeyCursor).
*/ -}}
WITH RECURSIVE walk(k, n) AS (
	(SELECT e.ordering_key, 1 FROM {{.Table}} e WHERE e.ordering_key > $1 AND {{template "unsettled"}}
	 ORDER BY e.ordering_key LIMIT 1)
	UNION ALL
	SELECT x.k, w.n + 1 FROM walk w CROSS JOIN LATERAL (
		SELECT e.ordering_key AS k FROM {{.Table}} e WHERE e.ordering_key > w.k AND {{template "unsettled"}}
		ORDER BY e.ordering_key LIMIT 1) x
	WHERE w.n < $2
)
SELECT k FROM walk WHERE n = $2
