{{/* bridge replay: relayed (done) rows in id order, id > $1 and id <= $2,
created_at in [$3, $4) (RFC 3339 text), ordering key $6 when $5 is not NULL,
stream $8 when $7 is not NULL, at most $9 rows. A plain read: no FOR UPDATE,
no SKIP LOCKED, so it neither waits on the relay's claims nor holds back its
marks; the caller stops reading at its byte budget. */ -}}
SELECT id, idempotency_key, subject, payload, headers::text, ordering_key, created_at, coalesce(stream, ''), coalesce(stream_seq, 0)
FROM {{.Table}}
WHERE status = 'done' AND id > $1 AND id <= $2 AND created_at >= $3::timestamptz AND created_at < $4::timestamptz
	AND ($5::text IS NULL OR ordering_key = $6::text) AND ($7::text IS NULL OR stream = $8::text)
ORDER BY id LIMIT $9
