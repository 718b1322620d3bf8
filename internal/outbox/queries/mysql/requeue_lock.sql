{{/* Step 2: those still stale, locked by primary key, SKIP LOCKED. Parameters: ids…, age (microseconds). */ -}}
SELECT id FROM {{.Table}} FORCE INDEX (PRIMARY)
WHERE id IN (/*ids*/) AND status = 'in_flight' AND claimed_at < {{template "now"}} - INTERVAL ? MICROSECOND
FOR UPDATE SKIP LOCKED
