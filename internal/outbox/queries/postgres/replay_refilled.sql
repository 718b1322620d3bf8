{{/* bridge replay into the rows' own stream: where the message of done row $2
is stored now ($1), fenced by the stream ($3) and sequence ($4) the replay
read. The status and every other column stay. */ -}}
UPDATE {{.Table}} SET stream_seq = $1 WHERE id = $2 AND status = 'done' AND stream = $3 AND stream_seq = $4
