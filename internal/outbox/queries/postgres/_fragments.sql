{{/*
Pieces the PostgreSQL statements share.

unsettled is the predicate of the ordering index: a row (alias e) that
holds back the later rows of its ordering key.

row_bytes is what a candidate row (alias o) of the claim would hold in the
relay's memory (see Row.size): its payload when the claim reads it (not
longer than $6) and its headers. Neither is read for it: octet_length of a
bytea stored out of line (TOAST) reads the length from the pointer, and
pg_column_size is the stored size of the jsonb.

fence is the condition of every mark (alias o, owner $1). It compares
coalesce(o.status, …) rather than o.status with 'in_flight' on purpose: the
plain form lets the planner drive the join from the in-flight partial
index, whose row estimate is stale during a burst (1 row against
thousands), and join every in-flight row with every array element —
measured 2.3 s for 1,000 marks among 3,000 in-flight rows. The coalesce
form leaves the primary key lookup per array element as the only plan:
25 ms.
*/}}
{{- define "unsettled"}}e.status IN ('pending', 'in_flight', 'failed'){{end}}
{{- define "row_bytes"}}CASE WHEN octet_length(o.payload) <= $6::bigint THEN octet_length(o.payload) ELSE 0 END + pg_column_size(o.headers){{end}}
{{- define "fence"}}o.id = m.id AND o.attempts = m.attempt AND coalesce(o.status, '') = 'in_flight' AND o.owner = $1{{end}}
