{{/* bridge replay: relayed (done) rows in id order, id > $1 and id <= $2,
created_at in [$3, $4) (RFC 3339 text), ordering key $6 when $5 is not NULL,
stream $8 when $7 is not NULL, at most $9 rows. A plain read: no FOR UPDATE,
no SKIP LOCKED, so it neither waits on the relay's claims nor holds back its
marks; the caller stops reading at its byte budget. The status is tested as
coalesce(status, '') (status is NOT NULL: the same rows) so that the plan is
the primary key's range in id order whatever the statistics say: with
status = 'done' the planner took the partial index on done rows, estimated
from statistics read while the rows were pending, and sorted every done row
after the id for each batch (1,000,000 rows replayed at 500 rows/s in
.ci/replay-bench). */ -}}
SELECT id, idempotency_key, subject, payload, headers::text, ordering_key, created_at, coalesce(stream, ''), coalesce(stream_seq, 0)
FROM {{.Table}}
WHERE coalesce(status, '') = 'done' AND id > $1 AND id <= $2 AND created_at >= $3::timestamptz AND created_at < $4::timestamptz
	AND ($5::text IS NULL OR ordering_key = $6::text) AND ($7::text IS NULL OR stream = $8::text)
ORDER BY id LIMIT $9
