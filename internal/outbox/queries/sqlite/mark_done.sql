{{/* One row: stream, stream sequence, id, attempt, owner. Run once per row in one transaction. */ -}}
UPDATE {{.Table}} SET status = 'done', relayed_at = {{template "now"}}, owner = NULL,
	stream = ?, stream_seq = ?, last_error = NULL
WHERE id = ? AND attempts = ? AND status = 'in_flight' AND owner = ?
