SELECT status FROM {{.Table}} WHERE id = ?
