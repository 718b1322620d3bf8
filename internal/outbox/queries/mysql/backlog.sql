{{/*
The backlog: how many rows are waiting to be relayed (pending or failed,
in their backoff too), counted up to 10,000 (BacklogCap), for the shares
of a relay over many tables (DB.BacklogEach). Each branch reads at most
10,000 entries of claimable_idx (status, ordering_key, id) and nothing
else, so its cost is bounded whatever else the table holds (a test for
available_at read every failed row: 0.25–0.40 s with 300,000 of them in
their backoff, a saboteur's run on MariaDB 10.11). The failed rows are
counted only while the pending ones are below the cap.
*/ -}}
SELECT CASE WHEN p.n >= 10000 THEN 10000 ELSE least(p.n + (SELECT count(*) FROM (SELECT 1 FROM {{.Table}} f FORCE INDEX ({{.Index "claimable"}})
		WHERE f.status = 'failed' LIMIT 10000) f), 10000) END
FROM (SELECT count(*) AS n FROM (SELECT 1 FROM {{.Table}} o FORCE INDEX ({{.Index "claimable"}}) WHERE o.status = 'pending' LIMIT 10000) o) p
