{{/* In-flight recovery: leases that started before now plus the (negative) seconds of the parameter become failed, claimable now. */ -}}
UPDATE {{.Table}} SET status = 'failed', owner = NULL, available_at = {{template "now"}},
	last_error = 'requeued after inflight timeout'
WHERE status = 'in_flight' AND claimed_at < {{template "now_plus"}}
