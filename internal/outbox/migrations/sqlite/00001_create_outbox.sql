-- The bridge table: one row per event to relay. See docs/DESIGN.md.
-- Times are UTC text in RFC 3339 form with milliseconds, written by
-- strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), so that they compare as text.
CREATE TABLE {{.Table}} (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    idempotency_key  TEXT    NOT NULL UNIQUE,
    subject          TEXT    NOT NULL,
    payload          BLOB    NOT NULL,
    headers          TEXT    NOT NULL DEFAULT '{}',
    ordering_key     TEXT    NULL,
    status           TEXT    NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'in_flight', 'done', 'failed', 'permanent_failed')),
    attempts         INTEGER NOT NULL DEFAULT 0,
    last_error       TEXT    NULL,
    owner            TEXT    NULL,
    available_at     TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    claimed_at       TEXT    NULL,
    first_claimed_at TEXT    NULL,
    created_at       TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    relayed_at       TEXT    NULL,
    stream           TEXT    NULL,
    stream_seq       INTEGER NULL
);

CREATE INDEX {{.Index "claimable"}} ON {{.Name}} (id) WHERE status IN ('pending', 'failed');

CREATE INDEX {{.Index "ordering"}} ON {{.Name}} (ordering_key, id)
    WHERE ordering_key IS NOT NULL AND status IN ('pending', 'in_flight', 'failed');

CREATE INDEX {{.Index "inflight"}} ON {{.Name}} (claimed_at) WHERE status = 'in_flight';

CREATE INDEX {{.Index "done"}} ON {{.Name}} (relayed_at) WHERE status = 'done';
