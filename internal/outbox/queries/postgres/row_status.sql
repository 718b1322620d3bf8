SELECT status FROM {{.Table}} WHERE id = $1
