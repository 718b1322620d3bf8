{{/*
Pieces the PostgreSQL statements share.

unsettled is the predicate of the ordering index: a row (alias e) that
holds back the later rows of its ordering key.

row_bytes is what a candidate row (alias o) of the claim would hold in the
relay's memory (see Row.size): its payload when the claim reads it (not
longer than $6) and its headers. Neither is read for it: octet_length of a
bytea stored out of line (TOAST) reads the length from the pointer, and
pg_column_size is the stored size of the jsonb.

lease and fence are how every mark (owner $1; per row an element m of its
arrays, id m.id and attempt m.attempt) finds its rows, and lands only on a
row still in the lease that claimed it: that attempt, in_flight, that
owner. lease (alias l) reads the element's row by primary key and checks
it, in a LATERAL subquery that OFFSET 0 keeps from being pulled up into
the join; fence joins the marked row (alias o) to it: the same row (id),
still as l found it (attempts, status, owner).

Why so: the table is not scanned for a mark, whatever its size and
statistics (TestMarkPlansLookUpEachRowByPrimaryKey). PostgreSQL estimates
conditions like the lease's on o (status and owner against constants) at
1 row whatever the table holds. With them on o and the array joined to o
directly, it drove the join from a scan of o below about 30,000 rows: a
sequential scan with every array element as a join filter against every
in-flight row, "Rows Removed by Join Filter: 999,500" and 270 ms for 500
marks in a 10,000-row table (3–4 ms by primary key). fence puts no
condition on o alone, so the planner counts o as the whole table and the
lookups as one row per element, and joins o to them by primary key: in
tables of 200 to 100,000 rows (the test; 100 by hand), fresh (no
statistics), analyzed, and stale (analyzed before the rows were claimed).
With the lease's conditions on o as well, a 200-row table still got a
scan of o driving the lookups: 200 × 200. (In a table of a page or two
the plan may read the page instead.)

Why o is compared with l rather than with the constants: when the row was
changed since the statement's snapshot (another relay's in-flight recovery
and claim), the update waits for it and then checks the conditions on o,
not those inside l, against the row's new version; the new version must
then still be the lease l found (suiteFencingWhileWaiting).

Why coalesce(e.status, …) rather than e.status = 'in_flight': the plain
form lets the planner read the in-flight partial index, whose row estimate
is stale during a burst (1 row against thousands), for every array element
— measured 2.3 s for 1,000 marks among 3,000 in-flight rows.
*/}}
{{- define "unsettled"}}e.status IN ('pending', 'in_flight', 'failed'){{end}}
{{- define "row_bytes"}}CASE WHEN octet_length(o.payload) <= $6::bigint THEN octet_length(o.payload) ELSE 0 END + pg_column_size(o.headers){{end}}
{{- define "lease"}}CROSS JOIN LATERAL (SELECT e.id, e.attempts, e.status, e.owner FROM {{.Table}} e
	WHERE e.id = m.id AND e.attempts = m.attempt AND coalesce(e.status, '') = 'in_flight' AND e.owner = $1 OFFSET 0) l{{end}}
{{- define "fence"}}(o.id, o.attempts, o.status, o.owner) = (l.id, l.attempts, l.status, l.owner){{end}}
{{- /*
wal_lookup is the lease of the WAL source's marks (postgreswal/mark.go): it
reads each array element's row by primary key (alias l) while the row is
unsettled, and the mark changes that row (alias o) only while its status is
still the one l found; as lease and fence above, for the same plans.
*/ -}}
{{- define "wal_unsettled"}}coalesce({{.}}.status, '') IN ('pending', 'failed', 'in_flight'){{end}}
{{- define "wal_lookup"}}CROSS JOIN LATERAL (SELECT e.id, e.status FROM {{.Table}} e WHERE e.id = m.id AND {{template "wal_unsettled" "e"}} OFFSET 0) l
WHERE (o.id, o.status) = (l.id, l.status){{end}}
