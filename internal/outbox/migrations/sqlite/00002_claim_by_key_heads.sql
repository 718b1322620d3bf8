-- The claim reads rows without an ordering key from this index, in id
-- order, and finds the first unsettled row of each ordering key key by key
-- (see queries/sqlite/claim.sql). See the PostgreSQL migration of the same
-- number for why.
CREATE INDEX {{.Index "unordered"}} ON {{.Name}} (id)
    WHERE ordering_key IS NULL AND status IN ('pending', 'failed');
