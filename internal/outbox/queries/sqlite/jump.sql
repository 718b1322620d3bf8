{{/*
The ?2-th ordering key with unsettled rows after the key ?1, or no row when
fewer follow (see jumpKeyCursor).
*/ -}}
WITH RECURSIVE walk(k, n) AS (
	SELECT (SELECT min(e.ordering_key) FROM {{.Table}} e WHERE e.ordering_key > ?1 AND {{template "unsettled"}}), 1
	UNION ALL
	SELECT (SELECT min(e.ordering_key) FROM {{.Table}} e WHERE e.ordering_key > w.k AND {{template "unsettled"}}), w.n + 1
	FROM walk w WHERE w.k IS NOT NULL AND w.n < ?2
)
SELECT k FROM walk WHERE n = ?2 AND k IS NOT NULL
