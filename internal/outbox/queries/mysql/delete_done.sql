{{/* Parameters: ids, attempt arms, owner. */ -}}
DELETE o FROM {{.Table}} o FORCE INDEX (PRIMARY)
WHERE id IN (/*ids*/) AND attempts = CASE id /*arms*/ END{{template "fence"}}
