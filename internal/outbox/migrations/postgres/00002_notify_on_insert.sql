-- Wake relays as soon as rows are committed: one NOTIFY per inserting
-- statement (not per row), delivered at commit. The relay LISTENs on the
-- channel "outbox_bridge"; the payload names the table. The poll interval
-- stays the fallback when a notification is lost (e.g. while the relay
-- reconnects).
CREATE FUNCTION {{.Table}}_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('outbox_bridge', '{{.Table}}');
    RETURN NULL;
END;
$$;

CREATE TRIGGER {{.Name}}_notify AFTER INSERT ON {{.Table}}
    FOR EACH STATEMENT EXECUTE FUNCTION {{.Table}}_notify();
