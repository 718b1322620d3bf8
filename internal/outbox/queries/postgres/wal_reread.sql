{{/* The WAL source: the status and stream position of the rows $1, read again from the slot. */ -}}
SELECT id, coalesce(status, ''), coalesce(stream, ''), coalesce(stream_seq, 0) FROM {{.Table}} WHERE id = ANY($1)
