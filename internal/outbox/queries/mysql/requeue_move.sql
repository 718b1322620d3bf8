{{/* Step 3: the locked rows become failed, claimable now. Parameters: ids…. */ -}}
UPDATE {{.Table}} FORCE INDEX (PRIMARY) SET status = 'failed', owner = NULL, available_at = {{template "now"}},
	last_error = 'requeued after inflight timeout'
WHERE id IN (/*ids*/)
