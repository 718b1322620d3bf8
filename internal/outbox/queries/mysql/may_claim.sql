{{/*
Whether a claim may take a row: a pending row, or a failed one past its
backoff. One dive into claimable_idx (status, ordering_key, id) for a pending
row; for a failed one the index has no available_at, so while no pending row
exists it reads the failed rows (by primary key) until one is due: with
20,000 rows failed and waiting, about 27 ms, as much as the claim's own
read of them (saboteur run, 2026-12-02). It does not ask whether the row heads its ordering key, as
stalled.sql does: that correlated NOT EXISTS made MariaDB 10.11 twelve times
slower on a keyed backlog (ProbeBeforeClaim). So it may answer true with
every claimable row queued behind a key's head in flight (the claim then
takes none, as without the probe), but never false with a row to claim.
*/ -}}
SELECT EXISTS (SELECT 1 FROM {{.Table}} o FORCE INDEX ({{.Index "claimable"}}) WHERE o.status = 'pending')
	OR EXISTS (SELECT 1 FROM {{.Table}} o FORCE INDEX ({{.Index "claimable"}})
		WHERE o.status = 'failed' AND o.available_at <= {{template "now"}})
