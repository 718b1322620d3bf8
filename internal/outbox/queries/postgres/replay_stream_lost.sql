{{/* bridge status: the relayed rows of stream $1 whose stream_seq is outside
[$2, $3], the stream's first and last sequence: messages the stream no
longer has. */ -}}
SELECT count(*) FROM {{.Table}}
WHERE status = 'done' AND stream = $1 AND (stream_seq < $2 OR stream_seq > $3)
