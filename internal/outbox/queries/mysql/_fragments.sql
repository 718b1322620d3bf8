{{/*
Pieces the MySQL/MariaDB statements share.

now is the database clock, UTC with microseconds, whatever the session
time zone.

row_bytes is what a row would hold in the relay's memory (see Row.size):
its payload when the claim reads it (not longer than the parameter) and its
headers, as the server counts their bytes.

fence ends every mark: the row is still in flight under the owner (the
statement's last parameter).

The comments ids and arms in the statements (mysqlIDs, mysqlArms) are
markers that mysqlExpand turns into a batch's placeholders: ?, ?, … and
WHEN ? THEN ? WHEN ? THEN ? ….
*/}}
{{- define "now"}}UTC_TIMESTAMP(6){{end}}
{{- define "row_bytes"}}CASE WHEN LENGTH(payload) <= ? THEN LENGTH(payload) ELSE 0 END + LENGTH(headers){{end}}
{{- define "fence"}} AND status = 'in_flight' AND owner = ?{{end}}
