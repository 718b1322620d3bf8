{{/*
The claim: owner ?1, limit ?2, key cursor ?3, key window ?4, max bytes ?5,
max payload ?6. SQLite has one writer at a time, so the claim is a single
UPDATE … RETURNING without SKIP LOCKED. It takes what the PostgreSQL claim
takes (queries/postgres/claim.sql): rows without an ordering key in id
order, and the claimable first unsettled row of each ordering key, found
key by key from the cursor with one index seek per key, at most ?4 keys per
lap (keyWindow); as many as fit in ?5 bytes (the first one always), with
the payloads not longer than ?6 bytes. The key walk must run as a
co-routine, which stops once the claim has its ?2 rows: hence NOT
MATERIALIZED (without it SQLite 3.54 materializes every key first) and
scalar subqueries rather than a join with the walk. The head of a key x.k
is the smallest id among its unsettled rows.
*/ -}}
WITH RECURSIVE after_cursor(k, n) AS NOT MATERIALIZED (
	SELECT (SELECT min(e.ordering_key) FROM {{.Table}} e WHERE e.ordering_key > ?3 AND {{template "unsettled"}}), 1
	UNION ALL
	SELECT (SELECT min(e.ordering_key) FROM {{.Table}} e WHERE e.ordering_key > a.k AND {{template "unsettled"}}), a.n + 1
	FROM after_cursor a WHERE a.k IS NOT NULL AND a.n < ?4
), up_to_cursor(k, n) AS NOT MATERIALIZED (
	SELECT (SELECT min(e.ordering_key) FROM {{.Table}} e WHERE e.ordering_key <= ?3 AND {{template "unsettled"}}), 1
	UNION ALL
	SELECT (SELECT min(e.ordering_key) FROM {{.Table}} e WHERE e.ordering_key > u.k AND e.ordering_key <= ?3 AND {{template "unsettled"}}), u.n + 1
	FROM up_to_cursor u WHERE u.k IS NOT NULL AND u.n < ?4
)
UPDATE {{.Table}} SET status = 'in_flight', owner = ?1, claimed_at = {{template "now"}},
	first_claimed_at = COALESCE(first_claimed_at, {{template "now"}}), attempts = attempts + 1
WHERE id IN (
	SELECT id FROM (
		SELECT id, sum(row_bytes) OVER w AS total, row_number() OVER w AS n FROM (
			SELECT id, row_bytes FROM (SELECT o.id, {{template "row_bytes"}} AS row_bytes FROM {{.Table}} o
				WHERE o.ordering_key IS NULL AND o.status IN ('pending', 'failed') AND o.available_at <= {{template "now"}}
				ORDER BY o.id LIMIT ?2)
			UNION ALL
			SELECT id, row_bytes FROM (SELECT o.id, {{template "row_bytes"}} AS row_bytes
				FROM (SELECT k FROM after_cursor WHERE k IS NOT NULL UNION ALL SELECT k FROM up_to_cursor WHERE k IS NOT NULL) x
				JOIN {{.Table}} o ON o.id = (SELECT min(e.id) FROM {{.Table}} e WHERE e.ordering_key = x.k AND {{template "unsettled"}})
				WHERE o.status IN ('pending', 'failed') AND o.available_at <= {{template "now"}}
				LIMIT ?2)
			ORDER BY 1 LIMIT ?2)
		WINDOW w AS (ORDER BY id ROWS UNBOUNDED PRECEDING))
	WHERE n = 1 OR total <= ?5)
RETURNING id, idempotency_key, subject, CASE WHEN octet_length(payload) <= ?6 THEN payload END, headers, ordering_key,
	attempts, created_at, claimed_at, first_claimed_at, octet_length(payload)
