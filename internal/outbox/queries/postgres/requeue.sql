{{/* In-flight recovery: leases older than $1 microseconds become failed, claimable now. */ -}}
UPDATE {{.Table}} SET status = 'failed', owner = NULL, available_at = now(),
	last_error = 'requeued after inflight timeout'
WHERE status = 'in_flight' AND claimed_at < now() - $1 * interval '1 microsecond'
