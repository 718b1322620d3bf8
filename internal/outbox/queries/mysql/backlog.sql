{{/*
The backlog: how many rows are waiting to be relayed now (pending, or
failed and past their backoff), counted up to 10,000 (BacklogCap) in
claimable_idx (status, ordering_key, id), for the shares of a relay over
many tables (DB.BacklogEach). Rows queued behind an unsettled row of their
ordering key count: they are backlog, though the next claim cannot take
them. The pending rows are counted in the index alone; the failed ones
read their rows for available_at.
*/ -}}
SELECT LEAST(
	(SELECT count(*) FROM (SELECT 1 FROM {{.Table}} o FORCE INDEX ({{.Index "claimable"}}) WHERE o.status = 'pending' LIMIT 10000) p)
	+ (SELECT count(*) FROM (SELECT 1 FROM {{.Table}} o FORCE INDEX ({{.Index "claimable"}})
		WHERE o.status = 'failed' AND o.available_at <= {{template "now"}} LIMIT 10000) f),
	10000)
