{{/* Rows of one or two statuses, newest first, a page at a time (the console). Parameters: the two statuses (the same twice for one), the subject twice ('' for any), a LIKE pattern twice ('' for any; '!' escapes), the id to list below twice (0 for none), the limit. */}}
SELECT id, status, subject, attempts, substr(coalesce(last_error, ''), 1, 500), created_at, available_at
FROM {{.Table}}
WHERE status IN ($1, $2) AND ($3 = '' OR subject = $4) AND ($5 = '' OR last_error LIKE $6 ESCAPE '!') AND ($7::bigint = 0 OR id < $8)
ORDER BY id DESC LIMIT $9
