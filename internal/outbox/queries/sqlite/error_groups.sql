{{/* The ? newest failed and dead-letter rows grouped by status, subject and the first 120 bytes of last_error (ErrorPrefixBytes), the largest groups first (the console). */}}
SELECT status, subject, e, count(*), max(id)
FROM (SELECT status, subject, substr(coalesce(last_error, ''), 1, 120) AS e, id
      FROM {{.Table}} WHERE status IN ('failed', 'permanent_failed') ORDER BY id DESC LIMIT ?) AS r
GROUP BY status, subject, e ORDER BY count(*) DESC, max(id) DESC LIMIT 100
