{{/* Per status: the count and the oldest created_at; and the database clock. */ -}}
SELECT status, count(*), min(created_at), now() FROM {{.Table}} GROUP BY status
