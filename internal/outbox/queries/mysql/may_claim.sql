{{/*
Whether a claim may take a row: a pending row, or a failed one past its
backoff. Two dives into claimable_idx (status, ordering_key, id), whatever
the table holds. It does not ask whether the row heads its ordering key, as
stalled.sql does: that correlated NOT EXISTS made MariaDB 10.11 twelve times
slower on a keyed backlog (ProbeBeforeClaim). So it may answer true with
every claimable row queued behind a key's head in flight (the claim then
takes none, as without the probe), but never false with a row to claim.
*/ -}}
SELECT EXISTS (SELECT 1 FROM {{.Table}} o FORCE INDEX ({{.Index "claimable"}}) WHERE o.status = 'pending')
	OR EXISTS (SELECT 1 FROM {{.Table}} o FORCE INDEX ({{.Index "claimable"}})
		WHERE o.status = 'failed' AND o.available_at <= {{template "now"}})
