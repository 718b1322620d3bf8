{{/*
The mysql-binlog source: the status of the rows read from the binary log,
by id (ids). A locking read: a row whose transaction is in the binary log
but not yet committed in InnoDB (the binary log is written first, at the
two-phase commit) is waited for, not missed. Columns: id, status,
idempotency_key (a row of the log whose id was taken again, after a TRUNCATE,
is not this one). By primary key, forced: on a small table MariaDB chose a
scan of every row, whose shared locks waited for the marks' transaction (a
mark held up held every batch's status read behind it).
*/ -}}
SELECT id, status, idempotency_key FROM {{.Table}} FORCE INDEX (PRIMARY) WHERE id IN (/*ids*/) LOCK IN SHARE MODE
