-- Fewer index writes per row (#24). Every index led by `status` is
-- rewritten whenever a row's status changes: with the three of 00001
-- (claimable, inflight, done), a claim (pending → in_flight) and a mark
-- (in_flight → done) each rewrote three index entries, and an insert wrote
-- five (bridge-bench: a 500-row mark_done took 35–45 ms on MariaDB 10.11,
-- 18–22 ms without the inflight and done indexes).
--
--   - inflight (status, claimed_at) is dropped: in-flight recovery reads
--     the in_flight rows through claimable (status, ordering_key, id), and
--     those are at most the relays' relay.max_in_flight, a few thousand,
--     whatever the table holds (queries/mysql/requeue_stale.sql).
--   - done (status, relayed_at) becomes relayed (relayed_at): retention
--     deletes the rows relayed before its cutoff in relayed_at order, and
--     only the mark writes relayed_at, so a claim rewrites one index entry
--     (claimable) and a mark two (claimable, relayed). Rows never relayed
--     have relayed_at NULL, which the range "relayed_at < cutoff" skips.
--
-- One ALTER TABLE, in place and without a lock (InnoDB online DDL: inserts,
-- claims and marks go on while the new index is built; it either completes
-- or changes nothing). A relay of the previous version keeps working on the
-- new layout: none of its statements names the indexes dropped; its
-- in-flight recovery and retention read the indexes above.
ALTER TABLE {{.Table}}
    DROP INDEX {{.Index "inflight"}},
    DROP INDEX {{.Index "done"}},
    ADD INDEX {{.Index "relayed"}} (relayed_at),
    ALGORITHM = INPLACE, LOCK = NONE
