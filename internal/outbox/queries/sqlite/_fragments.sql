{{/*
Pieces the SQLite statements share.

now is the database clock as stored: UTC, RFC 3339, milliseconds.
now_plus adds a signed number of seconds (an unnumbered parameter, the
statement's next) to now.

unsettled is the predicate of the ordering index: a row (alias e) that
holds back the later rows of its ordering key.

row_bytes is what a candidate row (alias o) of the claim would hold in the
relay's memory (see Row.size): its payload when the claim reads it (not
longer than ?6 bytes) and its headers. octet_length reads the length from
the record header, not the value (SQLite's OPFLAG_BYTELENARG).
*/}}
{{- define "now"}}strftime('%Y-%m-%dT%H:%M:%fZ', 'now'){{end}}
{{- define "now_plus"}}strftime('%Y-%m-%dT%H:%M:%fZ', 'now', printf('%+.6f seconds', ?)){{end}}
{{- define "unsettled"}}e.status IN ('pending', 'in_flight', 'failed'){{end}}
{{- define "row_bytes"}}CASE WHEN octet_length(o.payload) <= ?6 THEN octet_length(o.payload) ELSE 0 END + octet_length(o.headers){{end}}
