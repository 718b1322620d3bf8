package consumer

import (
	"crypto/sha256"
	"encoding/hex"
)

// Key returns the KV key under which the dedup entry of a message with
// Nats-Msg-Id msgID is stored: the lowercase hex SHA-256 of the id's bytes,
// 64 characters from [0-9a-f].
//
// A Nats-Msg-Id may hold any byte a header value can, while a KV key allows
// only [-/_=.a-zA-Z0-9] (nats.go jetstream, kv.go validKeyRe) and ends up in
// a subject, so the id is not used as it is. The hash is deterministic across
// processes, versions and languages, fixed in length whatever the id's size,
// and collision resistant: two distinct ids share a key only by a SHA-256
// collision, of which none is known. An operator finds a message's entry with
//
//	nats kv get BUCKET "$(printf %s "$MSG_ID" | sha256sum | cut -d' ' -f1)"
//
// and the entry's value repeats the id in clear (see the package doc).
func Key(msgID string) string {
	sum := sha256.Sum256([]byte(msgID))
	return hex.EncodeToString(sum[:])
}
