-- The claim reads rows without an ordering key from this index, in id
-- order, and finds the first unsettled row of each ordering key with a
-- skip scan of the ordering index (see queries/postgres/claim.sql). Reading
-- both kinds from one index in id order made each claim walk every row
-- queued behind an unsettled row of its key: with few keys and a long
-- backlog, a claim cost time in proportion to the backlog.
--
-- The claimable index stays for relays of the previous version during a
-- rolling upgrade, whose claim reads it. Building this index scans the
-- table once and blocks inserts meanwhile (seconds for millions of rows).
CREATE INDEX {{.Index "unordered"}} ON {{.Table}} (id)
    WHERE ordering_key IS NULL AND status IN ('pending', 'failed');
