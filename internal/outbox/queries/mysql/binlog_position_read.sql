{{/* The mysql-binlog source: its stored position. Columns: gtid_set, file, pos, updated_at. */ -}}
SELECT gtid_set, file, pos, updated_at FROM {{.Table}}_binlog WHERE id = 1
