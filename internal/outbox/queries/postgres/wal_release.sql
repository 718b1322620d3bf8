{{/* The WAL source's sweep: the failed rows $1 (waiting for a row set aside that is settled now) due at once. */ -}}
UPDATE {{.Table}} SET available_at = now() WHERE id = ANY($1) AND status = 'failed'
