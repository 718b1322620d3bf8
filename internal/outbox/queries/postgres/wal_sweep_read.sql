{{/*
The WAL source's sweep: up to $2 rows pending or failed and due, with ids
above $1, in id order, as many as fit in $3 bytes (the first one always);
the payload of those at most $4 bytes long (the others' only by its
length), and how many rows were candidates.
*/ -}}
SELECT id, idempotency_key, subject, CASE WHEN octet_length(payload) <= $4::bigint THEN payload END,
	headers::text, ordering_key, attempts, created_at, first_claimed_at, octet_length(payload), candidates
FROM (
	SELECT c.*, count(*) OVER () AS candidates, row_number() OVER w AS n,
		sum(CASE WHEN octet_length(c.payload) <= $4::bigint THEN octet_length(c.payload) ELSE 0 END + octet_length(c.headers::text)) OVER w AS total
	FROM (SELECT id, idempotency_key, subject, payload, headers, ordering_key, attempts, created_at, first_claimed_at FROM {{.Table}}
		WHERE status IN ('pending', 'failed') AND available_at <= now() AND id > $1 ORDER BY id LIMIT $2) c
	WINDOW w AS (ORDER BY id ROWS UNBOUNDED PRECEDING)
) f
WHERE n = 1 OR total <= $3::bigint
ORDER BY id
