{{/* The mysql-binlog source with relay.delete_on_relay: rows deleted after their PubAck. Parameters: ids. */ -}}
DELETE FROM {{.Table}} WHERE id IN (/*ids*/) AND status IN ('pending', 'failed')
