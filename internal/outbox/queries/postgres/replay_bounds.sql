{{/* bridge replay: how many relayed rows replay_read.sql selects after $1
(the same parameters, without the limit), and the last one's id: the
progress line's total and ETA. */ -}}
SELECT count(*), coalesce(max(id), 0)
FROM {{.Table}}
WHERE status = 'done' AND id > $1 AND id <= $2 AND created_at >= $3::timestamptz AND created_at < $4::timestamptz
	AND ($5::text IS NULL OR ordering_key = $6::text) AND ($7::text IS NULL OR stream = $8::text)
