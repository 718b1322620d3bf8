{{/*
The backlog: how many rows are waiting to be relayed (pending or failed,
in their backoff too), counted up to 10,000 (BacklogCap) in the claimable
index alone (its own condition: at most 10,000 entries read whatever else
the table holds), for the shares of a relay over many tables
(DB.BacklogEach).
*/ -}}
SELECT count(*) FROM (SELECT 1 FROM {{.Table}} o WHERE o.status IN ('pending', 'failed') ORDER BY o.id LIMIT 10000)
