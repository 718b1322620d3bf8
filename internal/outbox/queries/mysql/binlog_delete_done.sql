{{/* The mysql-binlog source with relay.delete_on_relay: rows deleted after their PubAck. Parameters: ids, idempotency_key arms. */ -}}
DELETE FROM {{.Table}} WHERE id IN (/*ids*/) AND idempotency_key = CASE id /*arms*/ END AND status IN ('pending', 'failed')
