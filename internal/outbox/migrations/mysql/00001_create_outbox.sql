-- The bridge table: one row per event to relay. See docs/DESIGN.md.
-- MySQL 8.0.16+ or MariaDB 10.6+ (InnoDB): expression defaults, enforced
-- CHECK constraints, FOR UPDATE SKIP LOCKED.
--
-- One statement, indexes declared inside it: MySQL commits every DDL
-- statement on its own, so a migration of several statements could stop
-- half-way, and the relay's connections do not allow multi-statement queries.
--
-- Times are DATETIME(6) in UTC, written from UTC_TIMESTAMP(6) (the database
-- clock) whatever the time zone of the session that inserts the row.
--
-- idempotency_key and ordering_key are VARBINARY(255) so that keys compare
-- byte for byte: utf8mb4_bin is a PAD SPACE collation, under which 'k' and
-- 'k ' are the same value of a unique index. A unique index on TEXT needs a
-- prefix length, hence a bounded column: keys longer than 255 bytes are
-- refused by the database (in strict SQL mode, the default since MySQL 5.7
-- and MariaDB 10.2.4, and always in the relay's sessions; a producer session
-- without strict mode would have them cut silently) and by `bridge enqueue`.
--
-- MySQL has no partial indexes: the PostgreSQL ones become composite indexes
-- led by status. The claim finds the first unsettled row of each ordering key
-- with the claimable index, so no (ordering_key, …) index is needed.
CREATE TABLE {{.Table}} (
    id               BIGINT         NOT NULL AUTO_INCREMENT PRIMARY KEY,
    idempotency_key  VARBINARY(255) NOT NULL,
    subject          TEXT           NOT NULL,
    payload          LONGBLOB       NOT NULL,
    headers          JSON           NOT NULL DEFAULT ('{}'),
    ordering_key     VARBINARY(255) NULL,
    status           VARCHAR(20)    NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'in_flight', 'done', 'failed', 'permanent_failed')),
    attempts         INT            NOT NULL DEFAULT 0,
    last_error       TEXT           NULL,
    owner            VARCHAR(255)   NULL,
    available_at     DATETIME(6)    NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    claimed_at       DATETIME(6)    NULL,
    first_claimed_at DATETIME(6)    NULL,
    created_at       DATETIME(6)    NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    relayed_at       DATETIME(6)    NULL,
    stream           VARCHAR(255)   NULL,
    stream_seq       BIGINT         NULL,

    UNIQUE KEY {{.Index "idempotency_key"}} (idempotency_key),
    -- The claim: rows without an ordering key in id order (status, NULL, id),
    -- and the first unsettled row of every key, MIN(id) per (status, key).
    KEY {{.Index "claimable"}} (status, ordering_key, id),
    -- In-flight recovery: leases older than the timeout.
    KEY {{.Index "inflight"}} (status, claimed_at),
    -- Retention: relayed rows older than relay.retention.
    KEY {{.Index "done"}} (status, relayed_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin
