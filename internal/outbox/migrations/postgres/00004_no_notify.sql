-- The wake-up serializes nothing: the NOTIFY trigger of migration 00002
-- goes. A transaction that has NOTIFY pending takes PostgreSQL's
-- instance-wide notification lock while it commits (src/backend/commands/
-- async.c, PreCommit_Notify), so every producing transaction of every
-- database of the server committed one after the other, and PREPARE
-- TRANSACTION refused a transaction that notified. The relay now follows
-- rows by adaptive polling (docs/DESIGN.md, "The wake-up"); relays of the
-- previous version keep working on their poll interval, their LISTEN
-- simply hears nothing. To opt in again, see docs/PRODUCERS.md.
--
-- DROP TRIGGER takes an ACCESS EXCLUSIVE lock on the table for an instant;
-- the lock timeout bounds how long producers queue behind it when a long
-- transaction holds the table (the migration then fails, and `bridge
-- migrate` can be run again).
SET LOCAL lock_timeout = '2s';
DROP TRIGGER IF EXISTS {{.Name}}_notify ON {{.Table}};
DROP FUNCTION IF EXISTS {{.Table}}_notify();
