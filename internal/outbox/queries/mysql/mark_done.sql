{{/* Parameters: stream arms, stream_seq arms, ids, attempt arms, owner. */ -}}
UPDATE {{.Table}} FORCE INDEX (PRIMARY) SET status = 'done', relayed_at = {{template "now"}}, owner = NULL, last_error = NULL,
	stream = CASE id /*arms*/ END, stream_seq = CASE id /*arms*/ END
WHERE id IN (/*ids*/) AND attempts = CASE id /*arms*/ END{{template "fence"}}
