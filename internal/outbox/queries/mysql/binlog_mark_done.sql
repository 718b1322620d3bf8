{{/*
The mysql-binlog source: rows done after their PubAck. Parameters: stream
arms, stream_seq arms, attempt arms, ids. Only an unsettled row changes, so
a mark written twice (after a restart) is harmless.
*/ -}}
UPDATE {{.Table}} FORCE INDEX (PRIMARY) SET status = 'done', relayed_at = {{template "now"}}, owner = NULL, last_error = NULL,
	stream = CASE id /*arms*/ END, stream_seq = CASE id /*arms*/ END, attempts = CASE id /*arms*/ END
WHERE id IN (/*ids*/) AND status IN ('pending', 'failed')
