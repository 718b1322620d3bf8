{{/* The mysql-binlog source: store its position. Parameters: gtid_set, file, pos. */ -}}
INSERT INTO {{.Table}}_binlog (id, gtid_set, file, pos, updated_at) VALUES (1, ?, ?, ?, {{template "now"}})
ON DUPLICATE KEY UPDATE gtid_set = VALUES(gtid_set), file = VALUES(file), pos = VALUES(pos), updated_at = VALUES(updated_at)
