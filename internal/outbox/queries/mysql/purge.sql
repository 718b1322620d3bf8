{{/*
Up to the limit (second parameter) done rows relayed more than the first
parameter's microseconds ago: a range of relayed_idx (relayed_at, migration
00002), which holds only relayed rows' times (NULL for the others).
*/ -}}
DELETE FROM {{.Table}} WHERE status = 'done' AND relayed_at < {{template "now"}} - INTERVAL ? MICROSECOND LIMIT ?
