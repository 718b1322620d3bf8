{{/*
The mysql-binlog source's sweep: up to a batch of rows the binary log will
not bring (any more), in id order, with ids above a cursor: failed rows that
are due, and pending rows created before a cutoff that the reader has
passed. Parameters: max payload (longer payloads are read by their length
only), cursor id, cutoff (UTC), limit. Columns: id, idempotency_key,
subject, payload or NULL, headers, ordering_key, status, attempts,
created_at, payload length, whether last_error is NULL (a row never tried:
not a dead letter put back by bridge retry, which keeps it).
*/ -}}
SELECT id, idempotency_key, subject, CASE WHEN LENGTH(payload) <= ? THEN payload END, headers, ordering_key, status,
	attempts, created_at, LENGTH(payload), last_error IS NULL
FROM {{.Table}}
WHERE status IN ('pending', 'failed') AND available_at <= {{template "now"}} AND id > ?
	AND (status = 'failed' OR created_at < ?)
ORDER BY id LIMIT ?
