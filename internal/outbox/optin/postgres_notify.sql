-- Opt-in wake-up by notification (PostgreSQL), for services that write
-- little: one NOTIFY per inserting statement, delivered at commit, which
-- the relay's LISTEN session turns into an immediate claim. Its cost: a
-- transaction with a NOTIFY pending takes the server's instance-wide
-- notification lock while it commits (src/backend/commands/async.c), so
-- the producing transactions of every database of the server commit one
-- after the other, and PREPARE TRANSACTION refuses them
-- (docs/PRODUCERS.md, "Wake-up by notification").
CREATE OR REPLACE FUNCTION {{.Table}}_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('outbox_bridge', '{{.Table}}');
    RETURN NULL;
END;
$$;

DROP TRIGGER IF EXISTS {{.Name}}_notify ON {{.Table}};
CREATE TRIGGER {{.Name}}_notify AFTER INSERT ON {{.Table}}
    FOR EACH STATEMENT EXECUTE FUNCTION {{.Table}}_notify();
