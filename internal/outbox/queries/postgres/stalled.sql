{{/* Whether a row has been claimable for more than $1 microseconds: rows
without an ordering key from the unordered index; of the others only the
head of each key (its first unsettled row) can be claimable, and the heads
are found as the claim finds them (claim.sql): walking the ordering index in
(ordering_key, id) order, one row per key, the first of each. Testing
every keyed row for an earlier unsettled one instead read the whole backlog
whenever every head was in flight: 9.9 s on a 600,000-row table, run after
every claim that was not full (bridge-bench --relays 1,2,4 --ordering-keys
1000, docs/BENCHMARKS.md). Migration 00005 dropped the index of claimable
rows. */ -}}
SELECT EXISTS (SELECT 1 FROM {{.Table}} o WHERE o.ordering_key IS NULL AND o.status IN ('pending', 'failed')
	AND o.available_at < now() - $1 * interval '1 microsecond')
	OR EXISTS (
	WITH RECURSIVE heads(k, status, available_at) AS (
		(SELECT e.ordering_key, e.status, e.available_at FROM {{.Table}} e WHERE e.ordering_key IS NOT NULL AND {{template "unsettled"}}
		 ORDER BY e.ordering_key, e.id LIMIT 1)
		UNION ALL
		SELECT n.* FROM heads h CROSS JOIN LATERAL (
			SELECT e.ordering_key, e.status, e.available_at FROM {{.Table}} e WHERE e.ordering_key > h.k AND {{template "unsettled"}}
			ORDER BY e.ordering_key, e.id LIMIT 1) n
	)
	SELECT 1 FROM heads WHERE status IN ('pending', 'failed') AND available_at < now() - $1 * interval '1 microsecond')
