{{/* Key, subject, payload, headers, ordering key: the new id, or no row when the key exists. */ -}}
INSERT INTO {{.Table}} (idempotency_key, subject, payload, headers, ordering_key)
VALUES (?, ?, ?, ?, ?) ON CONFLICT (idempotency_key) DO NOTHING RETURNING id
