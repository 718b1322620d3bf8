{{/* One row: id, attempt, owner. */ -}}
DELETE FROM {{.Table}} WHERE id = ? AND attempts = ? AND status = 'in_flight' AND owner = ?
