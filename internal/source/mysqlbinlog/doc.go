// Package mysqlbinlog is source: mysql-binlog: the bridge table on MySQL or
// MariaDB, its inserts read from the server's binary log as a replica
// reads them (github.com/go-mysql-org/go-mysql's replication package), in
// commit order, instead of claimed row by row.
//
// The table stays the record of what was relayed: a row read from the log
// is published only while the table says it is pending, and marked done
// (or deleted, or failed, or a dead letter) after its outcome, in batches.
// The log position past which every row was published and marked is
// stored in a table of the relay's beside the bridge table (<table>_binlog),
// written in the transaction of those marks, so that the two never
// disagree: after a crash the rows after it are read again, those the
// table marks settled are skipped, and the others are published again
// with the same Nats-Msg-Id (JetStream drops the repeats within its
// duplicate window). A sweep publishes the pending rows the log will not
// bring: written before the relay's first position, put back by bridge
// retry, or committed while a purged position was lost.
//
// One relay reads a table's log at a time: the others wait as standbys on
// a named lock of the database (GET_LOCK), held by the session of the
// reader. docs/MYSQL-BINLOG.md has the set-up and the promises.
package mysqlbinlog
