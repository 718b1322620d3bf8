{{/* See queries/postgres/replay_refilled.sql. */ -}}
UPDATE {{.Table}} SET stream_seq = ?1 WHERE id = ?2 AND status = 'done' AND stream = ?3 AND stream_seq = ?4
