SELECT stream FROM {{.Table}} WHERE subject = $1 AND status = 'done' AND stream IS NOT NULL AND stream <> '' LIMIT 1
