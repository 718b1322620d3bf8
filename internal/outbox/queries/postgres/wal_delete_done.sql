{{/* The WAL source with relay.delete_on_relay: rows $1 deleted after their PubAck. The ids deleted. */ -}}
DELETE FROM {{.Table}} o USING unnest($1::bigint[]) AS m(id)
{{template "wal_lookup" .}} RETURNING o.id
