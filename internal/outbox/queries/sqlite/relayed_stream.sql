SELECT stream FROM {{.Table}} WHERE subject = ? AND status = 'done' AND stream IS NOT NULL AND stream <> '' LIMIT 1
