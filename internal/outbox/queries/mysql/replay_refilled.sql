{{/* See queries/postgres/replay_refilled.sql. */ -}}
UPDATE {{.Table}} SET stream_seq = ? WHERE id = ? AND status = 'done' AND stream = ? AND stream_seq = ?
