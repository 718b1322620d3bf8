{{/* bridge status: per stream recorded on relayed (done) rows, the rows and
their lowest and highest stream_seq, to compare with what the stream holds
(replay.CheckStreams). */ -}}
SELECT stream, count(*), min(stream_seq), max(stream_seq)
FROM {{.Table}}
WHERE status = 'done' AND stream IS NOT NULL AND stream <> '' AND stream_seq IS NOT NULL
GROUP BY stream ORDER BY stream
