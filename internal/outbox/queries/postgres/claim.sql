{{/*
The claim: owner $1, limit $2, key cursor $3, key window $4, max bytes $5,
max payload $6. It locks rows from two places (SKIP LOCKED), then updates
the first $2 of them in id order, as many as fit in $5 bytes (the first one
always), and returns the payload of those whose payload is at most $6 bytes
(the others' only by its length):
  - rows without an ordering key: the unordered partial index, in id order;
  - the first unsettled row (the head) of each ordering key that is
    claimable: a skip scan of the ordering index, one index descent per
    key — the keys after the cursor, then from the first key up to the
    cursor, at most $4 keys each (keyWindow) — that stops after $2
    claimable heads.

A row behind its key's head is never read, so a claim costs the same with a
backlog of 100 or 1,000,000 rows queued behind a few keys (a scan in id
order that skipped them took 112 ms for 40 rows out of 10,000). After the
row's own columns comes the next cursor: the last key claimed in scan
order, so that the next claim starts after it and every key gets its turn
when more keys are claimable than a claim takes. Key order is the
database's (the column's collation), which is why the cursor is computed
here; the next two columns say whether a claimed key came after the cursor
and whether any key with unsettled rows does: when none was claimed after
it, jump.sql moves it (jumpKeyCursor). The last is the number of rows
claimed, so that the relay allocates their slice once.
*/ -}}
WITH RECURSIVE after_cursor(k, id, status, available_at, n) AS (
	(SELECT e.ordering_key, e.id, e.status, e.available_at, 1 FROM {{.Table}} e
	 WHERE e.ordering_key > $3 AND {{template "unsettled"}}
	 ORDER BY e.ordering_key, e.id LIMIT 1)
	UNION ALL
	SELECT n.*, h.n + 1 FROM after_cursor h CROSS JOIN LATERAL (
		SELECT e.ordering_key, e.id, e.status, e.available_at FROM {{.Table}} e
		WHERE e.ordering_key > h.k AND {{template "unsettled"}}
		ORDER BY e.ordering_key, e.id LIMIT 1) n
	WHERE h.n < $4
), up_to_cursor(k, id, status, available_at, n) AS (
	(SELECT e.ordering_key, e.id, e.status, e.available_at, 1 FROM {{.Table}} e
	 WHERE e.ordering_key <= $3 AND {{template "unsettled"}}
	 ORDER BY e.ordering_key, e.id LIMIT 1)
	UNION ALL
	SELECT n.*, h.n + 1 FROM up_to_cursor h CROSS JOIN LATERAL (
		SELECT e.ordering_key, e.id, e.status, e.available_at FROM {{.Table}} e
		WHERE e.ordering_key > h.k AND e.ordering_key <= $3 AND {{template "unsettled"}}
		ORDER BY e.ordering_key, e.id LIMIT 1) n
	WHERE h.n < $4
), free AS (
	SELECT o.id, {{template "row_bytes"}} AS row_bytes FROM {{.Table}} o
	WHERE o.ordering_key IS NULL AND o.status IN ('pending', 'failed') AND o.available_at <= now()
	ORDER BY o.id
	LIMIT $2
	FOR UPDATE SKIP LOCKED
), heads AS (
	SELECT o.id, {{template "row_bytes"}} AS row_bytes FROM {{.Table}} o
	WHERE o.id = ANY(ARRAY(
		SELECT h.id FROM (SELECT * FROM after_cursor UNION ALL SELECT * FROM up_to_cursor) h
		WHERE h.status IN ('pending', 'failed') AND h.available_at <= now()
		LIMIT $2))
	  AND o.status IN ('pending', 'failed') AND o.available_at <= now()
	FOR UPDATE SKIP LOCKED
), c AS (
	SELECT id, row_bytes FROM free UNION ALL SELECT id, row_bytes FROM heads
	ORDER BY id
	LIMIT $2
), fit AS (
	SELECT id FROM (
		SELECT id, sum(row_bytes) OVER w AS total, row_number() OVER w AS n FROM c
		WINDOW w AS (ORDER BY id ROWS UNBOUNDED PRECEDING)) f
	WHERE n = 1 OR total <= $5::bigint
), claimed AS (
	UPDATE {{.Table}} o SET status = 'in_flight', owner = $1, claimed_at = now(),
		first_claimed_at = COALESCE(o.first_claimed_at, now()), attempts = o.attempts + 1
	WHERE o.id = ANY(ARRAY(SELECT id FROM fit))
	RETURNING o.id, o.idempotency_key, o.subject, CASE WHEN octet_length(o.payload) <= $6::bigint THEN o.payload END AS payload,
		o.headers::text, o.ordering_key, o.attempts, o.created_at, o.claimed_at, o.first_claimed_at, octet_length(o.payload) AS payload_size
)
SELECT id, idempotency_key, subject, payload, headers, ordering_key, attempts, created_at, claimed_at, first_claimed_at, payload_size,
	coalesce(max(ordering_key) FILTER (WHERE ordering_key <= $3) OVER (),
		max(ordering_key) FILTER (WHERE ordering_key > $3) OVER ()),
	coalesce(bool_or(ordering_key > $3) OVER (), false),
	EXISTS (SELECT 1 FROM {{.Table}} e WHERE e.ordering_key > $3 AND {{template "unsettled"}}),
	count(*) OVER ()
FROM claimed
