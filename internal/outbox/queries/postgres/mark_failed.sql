{{/*
Owner $1; per row: ids $2, attempts $3, new statuses $4, errors $5, backoff
$6 (microseconds), refund $7 (the attempt is given back).
*/ -}}
UPDATE {{.Table}} o SET status = m.status, last_error = m.err, owner = NULL,
	available_at = now() + m.delay * interval '1 microsecond',
	attempts = o.attempts - CASE WHEN m.refund THEN 1 ELSE 0 END
FROM unnest($2::bigint[], $3::int[], $4::text[], $5::text[], $6::bigint[], $7::bool[])
	AS m(id, attempt, status, err, delay, refund)
	{{template "lease" .}}
WHERE {{template "fence"}}
