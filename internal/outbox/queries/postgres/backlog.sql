{{/*
The backlog: how many rows are waiting to be relayed now (pending, or
failed and past their backoff), counted up to 10,000 (BacklogCap) in each
of the two partial indexes the claim reads (unordered, ordering), for the
shares of a relay over many tables (DB.BacklogEach). Rows queued behind an
unsettled row of their ordering key count: they are backlog, though the
next claim cannot take them. Each branch reads at most 10,000 rows
(available_at is not in the indexes): for 100,000 rows waiting of each
kind, about 10 ms on PostgreSQL 15, 2-core machine (2 ms for the unkeyed
branch by its index, 8 ms for the keyed one, which the planner read by a
sequential scan).
*/ -}}
SELECT LEAST(
	(SELECT count(*) FROM (SELECT 1 FROM {{.Table}} o WHERE o.ordering_key IS NULL AND o.status IN ('pending', 'failed') AND o.available_at <= now() LIMIT 10000) u)
	+ (SELECT count(*) FROM (SELECT 1 FROM {{.Table}} e WHERE e.ordering_key IS NOT NULL AND {{template "unsettled"}}
		AND e.status IN ('pending', 'failed') AND e.available_at <= now() LIMIT 10000) k),
	10000)
