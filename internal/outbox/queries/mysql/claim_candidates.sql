{{/*
Step 1 of the claim (see mysqlExecutor.Claim): the claimable rows, a
non-locking read: pending or failed and available, without ordering key or
first of their key among its rows not done or permanent_failed (the head of
the key). Parameters: mysqlCandidateArgs — want rows without key (pending,
failed), then (cursor, want) for each of the four branches of the walk,
then want keys. Columns: id, ordering key, lap, ready (see
readMySQLCandidates), in no particular order.

It reads claimable_idx (status, ordering_key, id) only, and never rows that
are blocked behind the head of their key nor relayed ones:
  - rows without a key: one branch per status, each reading the index in id
    order and stopping at its LIMIT (an IN over two statuses would sort
    every claimable row);
  - heads: a walk over the keys that have a pending or failed row, from the
    key cursor on (lap 0) and then from the first key up to the cursor (lap
    1), at most LIMIT keys (one branch per status and lap, GROUP BY in index
    order, so MariaDB stops at the LIMIT: a loose index scan, one index dive
    per key, when keys are few and hold many rows, a range scan reading one
    row per key when each holds one). The head of each walked key is the
    least of its first pending, in_flight and failed ids, three index dives
    (9223372036854775807, the largest BIGINT, stands for "no such row": a
    NULL would make LEAST NULL; it is never an id in practice and never
    ready, since no row has it); it is ready when it is pending or failed and
    available. Every walked key is returned, ready or not, so that the claim
    can move the cursor past a window of held-back keys.

The first version asked NOT EXISTS (an earlier unsettled row of the key)
per scanned row, as the PostgreSQL claim did then; MariaDB 10.11 walked the
primary key through every done row to answer it (0.7 s per claim with
200,000 done rows), and even with the index pinned, evaluating the
dependent subquery for every blocked row took 100-300 ms per claim with
6,000 rows queued behind 56 keys. The second took MIN(id) per (status, key)
over every key: a loose index scan that stayed cheap for few keys but read
every key on every claim, 0.8 s per claim with 100,000 keys. MariaDB cannot
seek with a value of the outer query inside a subquery (no LATERAL; a
correlated "key > w.k" scans the index from its start), so the walk is a
window of keys rather than a recursive skip scan as on PostgreSQL and
SQLite.

The walk's status literals carry the column's collation: in a session whose
connection collation is utf8mb4_general_ci (Go's MySQL driver's) MariaDB
10.11 no longer treats the status of "GROUP BY status, key" as a constant,
sorts the walk in a temporary table and reads every key.
*/ -}}
(SELECT o.id, NULL AS k, 0 AS lap, 1 AS ready FROM {{.Table}} o FORCE INDEX ({{.Index "claimable"}})
	WHERE o.status = 'pending' AND o.ordering_key IS NULL AND o.available_at <= {{template "now"}}
	ORDER BY o.id LIMIT ?)
UNION ALL
(SELECT o.id, NULL AS k, 0 AS lap, 1 AS ready FROM {{.Table}} o FORCE INDEX ({{.Index "claimable"}})
	WHERE o.status = 'failed' AND o.ordering_key IS NULL AND o.available_at <= {{template "now"}}
	ORDER BY o.id LIMIT ?)
UNION ALL
(SELECT h.id, h.k, h.lap,
		COALESCE(o.status IN ('pending', 'failed') AND o.available_at <= {{template "now"}}, 0) AS ready
	FROM (
		SELECT w.k, w.lap, LEAST(
			COALESCE((SELECT x.id FROM {{.Table}} x FORCE INDEX ({{.Index "claimable"}})
			WHERE x.status = 'pending' AND x.ordering_key = w.k ORDER BY x.id LIMIT 1), 9223372036854775807),
			COALESCE((SELECT x.id FROM {{.Table}} x FORCE INDEX ({{.Index "claimable"}})
			WHERE x.status = 'in_flight' AND x.ordering_key = w.k ORDER BY x.id LIMIT 1), 9223372036854775807),
			COALESCE((SELECT x.id FROM {{.Table}} x FORCE INDEX ({{.Index "claimable"}})
			WHERE x.status = 'failed' AND x.ordering_key = w.k ORDER BY x.id LIMIT 1), 9223372036854775807)) AS id
		FROM (
			(SELECT e.ordering_key AS k, 0 AS lap FROM {{.Table}} e FORCE INDEX ({{.Index "claimable"}})
				WHERE e.status = _utf8mb4'pending' COLLATE utf8mb4_bin AND e.ordering_key > ?
				GROUP BY e.status, e.ordering_key ORDER BY e.status, e.ordering_key LIMIT ?)
			UNION ALL
			(SELECT e.ordering_key AS k, 0 AS lap FROM {{.Table}} e FORCE INDEX ({{.Index "claimable"}})
				WHERE e.status = _utf8mb4'failed' COLLATE utf8mb4_bin AND e.ordering_key > ?
				GROUP BY e.status, e.ordering_key ORDER BY e.status, e.ordering_key LIMIT ?)
			UNION ALL
			(SELECT e.ordering_key AS k, 1 AS lap FROM {{.Table}} e FORCE INDEX ({{.Index "claimable"}})
				WHERE e.status = _utf8mb4'pending' COLLATE utf8mb4_bin AND e.ordering_key <= ?
				GROUP BY e.status, e.ordering_key ORDER BY e.status, e.ordering_key LIMIT ?)
			UNION ALL
			(SELECT e.ordering_key AS k, 1 AS lap FROM {{.Table}} e FORCE INDEX ({{.Index "claimable"}})
				WHERE e.status = _utf8mb4'failed' COLLATE utf8mb4_bin AND e.ordering_key <= ?
				GROUP BY e.status, e.ordering_key ORDER BY e.status, e.ordering_key LIMIT ?)) w
		GROUP BY w.lap, w.k ORDER BY w.lap, w.k LIMIT ?) h
	LEFT JOIN {{.Table}} o FORCE INDEX (PRIMARY) ON o.id = h.id)
