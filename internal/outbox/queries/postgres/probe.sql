{{/* Every column of the table contract, no row. */ -}}
SELECT id, idempotency_key, subject, payload, headers, ordering_key, status, attempts, last_error, owner, available_at, claimed_at, first_claimed_at, created_at, relayed_at, stream, stream_seq
FROM {{.Table}} WHERE false
