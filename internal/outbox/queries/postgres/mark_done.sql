{{/* Owner $1; per row: ids $2, attempts $3, streams $4, stream sequences $5. */ -}}
UPDATE {{.Table}} o SET status = 'done', relayed_at = now(), owner = NULL,
	stream = m.stream, stream_seq = m.seq, last_error = NULL
FROM unnest($2::bigint[], $3::int[], $4::text[], $5::bigint[]) AS m(id, attempt, stream, seq)
	{{template "lease" .}}
WHERE {{template "fence"}}
