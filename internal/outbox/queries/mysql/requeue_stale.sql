{{/*
Step 1 of in-flight recovery (see mysqlExecutor.Requeue): stale leases,
found by a non-locking read. Parameters: age (microseconds), limit.

An UPDATE that scanned inflight_idx itself locked (and waited for) rows
that other relays were claiming or marking, and deadlocked with them; one
that read the stale rows in a derived table still took shared locks on
inflight_idx on MariaDB 10.11 and waited 50 s (innodb_lock_wait_timeout)
behind a relay frozen in the middle of a claim.

It reads the in_flight rows through claimable_idx (status, ordering_key,
id) and sorts the stale ones by claimed_at: the in-flight rows are at most
the relays' relay.max_in_flight, whatever the table holds, so no index of
leases is kept (migration 00002 dropped it: one index entry less to rewrite
at every claim and mark).
*/ -}}
SELECT id FROM {{.Table}} FORCE INDEX ({{.Index "claimable"}})
WHERE status = 'in_flight' AND claimed_at < {{template "now"}} - INTERVAL ? MICROSECOND
ORDER BY claimed_at LIMIT ?
