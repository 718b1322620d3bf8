{{/*
The mysql-binlog source: rows failed (set aside, due again after a backoff)
or dead letters. Parameters: status arms, last_error arms, attempt arms,
delay arms (microseconds), ids, idempotency_key arms.
*/ -}}
UPDATE {{.Table}} FORCE INDEX (PRIMARY) SET status = CASE id /*arms*/ END, last_error = CASE id /*arms*/ END, owner = NULL,
	attempts = CASE id /*arms*/ END, available_at = {{template "now"}} + INTERVAL (CASE id /*arms*/ END) MICROSECOND
WHERE id IN (/*ids*/) AND idempotency_key = CASE id /*arms*/ END AND status IN ('pending', 'failed')
