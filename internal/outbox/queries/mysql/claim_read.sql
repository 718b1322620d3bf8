{{/* Step 4 of the claim: the claimed rows. Parameters: max payload, ids…. */ -}}
SELECT id, idempotency_key, subject, CASE WHEN LENGTH(payload) <= ? THEN payload END, headers, ordering_key,
	attempts, created_at, claimed_at, first_claimed_at, LENGTH(payload)
FROM {{.Table}} WHERE id IN (/*ids*/) ORDER BY id
