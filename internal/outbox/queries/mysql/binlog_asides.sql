{{/*
The mysql-binlog source: the ordering keys that have failed rows (set aside
or waiting for one), read at start through the claimable index. Columns:
ordering_key, the least id.
*/ -}}
SELECT ordering_key, MIN(id) FROM {{.Table}} WHERE status = 'failed' AND ordering_key IS NOT NULL GROUP BY ordering_key
