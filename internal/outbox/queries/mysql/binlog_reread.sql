{{/*
The mysql-binlog source: the rows of a transaction read from the binary log
in parts (more rows than a batch), by id (ids), as the table holds them: an
UPDATE of a row by its own transaction may come in the log after the part
with the row's insert was handed on, and the table has it. Parameters: max
payload (longer payloads are read by their length only), ids. Columns as
binlog_sweep_read.sql's.
*/ -}}
SELECT id, idempotency_key, subject, CASE WHEN LENGTH(payload) <= ? THEN payload END, headers, ordering_key, status,
	attempts, created_at, LENGTH(payload), last_error IS NULL
FROM {{.Table}} FORCE INDEX (PRIMARY)
WHERE id IN (/*ids*/)
