{{/* Step 3 of the claim: the lease. Parameters: owner, ids…. */ -}}
UPDATE {{.Table}} FORCE INDEX (PRIMARY) SET status = 'in_flight', owner = ?, claimed_at = {{template "now"}},
	first_claimed_at = COALESCE(first_claimed_at, {{template "now"}}), attempts = attempts + 1
WHERE id IN (/*ids*/)
