{{/* Owner $1; per row: ids $2, attempts $3. */ -}}
DELETE FROM {{.Table}} o
USING unnest($2::bigint[], $3::int[]) AS m(id, attempt)
	{{template "lease" .}}
WHERE {{template "fence"}}
