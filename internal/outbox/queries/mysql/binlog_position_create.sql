{{/*
The mysql-binlog source's position: one row, the binary log position past
which every row of the table was published and marked (written in the
transaction of those marks). gtid_set is the GTID set of that point (MariaDB
domain-server-sequence list, or MySQL uuid:interval list), empty where
GTIDs are off; file and pos the same point in the source server's binary
log files. Created by bridge migrate; kept when the bridge table's own
migrations run.
*/ -}}
CREATE TABLE IF NOT EXISTS {{.Table}}_binlog (
    id          TINYINT      NOT NULL PRIMARY KEY CHECK (id = 1),
    gtid_set    TEXT         NOT NULL,
    file        VARCHAR(512) NOT NULL,
    pos         BIGINT       NOT NULL,
    server_uuid VARCHAR(64)  NOT NULL DEFAULT '',
    updated_at  DATETIME(6)  NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin
