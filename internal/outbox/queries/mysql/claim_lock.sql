{{/*
Step 2 of the claim: the candidates still claimable, locked by primary key,
SKIP LOCKED, with what each would hold. Parameters: max payload, ids…,
limit.
*/ -}}
SELECT id, {{template "row_bytes"}} FROM {{.Table}} FORCE INDEX (PRIMARY)
WHERE id IN (/*ids*/) AND status IN ('pending', 'failed') AND available_at <= {{template "now"}}
ORDER BY id
LIMIT ?
FOR UPDATE SKIP LOCKED
