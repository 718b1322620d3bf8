{{/*
The backlog: how many rows are waiting to be relayed (pending or failed,
in their backoff too; rows of an ordering key in flight too), counted up
to 10,000 (BacklogCap), for the shares of a relay over many tables
(DB.BacklogEach). Each branch reads at most 10,000 entries of one of the
claim's partial indexes, in its order, and nothing else (the conditions
are the indexes' own: an index-only scan where the visibility map
allows), so its cost is bounded whatever else the table holds: a test for
available_at (not in the indexes) made PostgreSQL read past every row in
its backoff, or scan a table of a million done rows (a saboteur's run:
216–248 ms). The keyed branch is read only while the unkeyed one is below
the cap.
*/ -}}
SELECT CASE WHEN u.n >= 10000 THEN 10000 ELSE least(u.n + (SELECT count(*) FROM (SELECT 1 FROM {{.Table}} e
		WHERE e.ordering_key IS NOT NULL AND {{template "unsettled"}} ORDER BY e.ordering_key, e.id LIMIT 10000) k), 10000) END
FROM (SELECT count(*) AS n FROM (SELECT 1 FROM {{.Table}} o
	WHERE o.ordering_key IS NULL AND o.status IN ('pending', 'failed') ORDER BY o.id LIMIT 10000) o) u
