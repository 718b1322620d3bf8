{{/*
Key, subject, payload, headers, ordering key. ON DUPLICATE KEY UPDATE with
no change: 1 row affected when inserted, 0 when the key exists. Not INSERT
IGNORE, which would also turn other errors (a value too long, a bad JSON)
into warnings.
*/ -}}
INSERT INTO {{.Table}} (idempotency_key, subject, payload, headers, ordering_key)
VALUES (?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE id = id
