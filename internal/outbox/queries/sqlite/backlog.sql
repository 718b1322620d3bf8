{{/*
The backlog: how many rows are waiting to be relayed now (pending, or
failed and past their backoff), counted up to 10,000 (BacklogCap) in the
claimable index, for the shares of a relay over many tables
(DB.BacklogEach). Rows queued behind an unsettled row of their ordering
key count: they are backlog, though the next claim cannot take them.
*/ -}}
SELECT min(
	(SELECT count(*) FROM (SELECT 1 FROM {{.Table}} o WHERE o.status IN ('pending', 'failed') AND o.available_at <= {{template "now"}} LIMIT 10000)),
	10000)
