{{/* The mysql-binlog source: forget the position (bridge slot drop): the next run starts at the server's current position and sweeps. */ -}}
DELETE FROM {{.Table}}_binlog WHERE id = 1
