{{/* bridge status: the oldest relayed row of stream $1 whose stream_seq is in
[$2, $3]: its message is read from the stream to tell a stream made again
(the sequence holds another message) from one that kept its messages. */ -}}
SELECT id, idempotency_key, stream_seq FROM {{.Table}}
WHERE status = 'done' AND stream = $1 AND stream_seq >= $2 AND stream_seq <= $3
ORDER BY id LIMIT 1
