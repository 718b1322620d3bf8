{{/* One row: new status, error, backoff (seconds), refund (0 or 1), id, attempt, owner. */ -}}
UPDATE {{.Table}} SET status = ?, last_error = ?, owner = NULL,
	available_at = {{template "now_plus"}}, attempts = attempts - ?
WHERE id = ? AND attempts = ? AND status = 'in_flight' AND owner = ?
