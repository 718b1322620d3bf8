{{/* Key $1, subject $2, payload $3, headers $4, ordering key $5: the new id, or no row when the key exists. */ -}}
INSERT INTO {{.Table}} (idempotency_key, subject, payload, headers, ordering_key)
VALUES ($1, $2, $3, $4::jsonb, $5) ON CONFLICT (idempotency_key) DO NOTHING RETURNING id
