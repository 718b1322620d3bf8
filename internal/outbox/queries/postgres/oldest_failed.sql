{{/* The failed row with the lowest id, from the unordered and the ordering
index (migration 00005 dropped the index of claimable rows). */ -}}
SELECT id, subject, attempts, last_error, created_at, now() FROM (
	(SELECT id, subject, attempts, last_error, created_at FROM {{.Table}}
		WHERE ordering_key IS NULL AND status = 'failed' ORDER BY id LIMIT 1)
	UNION ALL
	(SELECT id, subject, attempts, last_error, created_at FROM {{.Table}}
		WHERE ordering_key IS NOT NULL AND status = 'failed' ORDER BY id LIMIT 1)
) f ORDER BY id LIMIT 1
