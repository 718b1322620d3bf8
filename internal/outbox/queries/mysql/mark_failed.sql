{{/*
Parameters: status arms, last_error arms, delay arms (microseconds), refund
arms (0 or 1), ids, attempt arms, owner.
*/ -}}
UPDATE {{.Table}} FORCE INDEX (PRIMARY) SET status = CASE id /*arms*/ END, last_error = CASE id /*arms*/ END, owner = NULL,
	available_at = {{template "now"}} + INTERVAL (CASE id /*arms*/ END) MICROSECOND,
	attempts = attempts - CASE id /*arms*/ END
WHERE id IN (/*ids*/) AND attempts = CASE id /*arms*/ END{{template "fence"}}
