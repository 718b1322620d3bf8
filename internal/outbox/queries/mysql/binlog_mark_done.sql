{{/*
The mysql-binlog source: rows done after their PubAck. Parameters: stream
arms, stream_seq arms, attempt arms, ids, idempotency_key arms. Only an
unsettled row changes, and only the row of that id that has the key (an id
taken again after a TRUNCATE is another row), so a mark written twice (after a
restart) is harmless.
*/ -}}
UPDATE {{.Table}} FORCE INDEX (PRIMARY) SET status = 'done', relayed_at = {{template "now"}}, owner = NULL, last_error = NULL,
	stream = CASE id /*arms*/ END, stream_seq = CASE id /*arms*/ END, attempts = CASE id /*arms*/ END
WHERE id IN (/*ids*/) AND idempotency_key = CASE id /*arms*/ END AND status IN ('pending', 'failed')
