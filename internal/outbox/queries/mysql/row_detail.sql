{{/* One row whole but for its payload, of which the first ? bytes (the console). */}}
SELECT id, idempotency_key, subject, headers, ordering_key, status, attempts, last_error, owner,
       created_at, available_at, claimed_at, first_claimed_at, relayed_at, stream, stream_seq,
       LENGTH(payload), SUBSTRING(payload, 1, ?)
FROM {{.Table}} WHERE id = ?
