package outbox

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// HashPrefix begins every Nats-Msg-Id that is a digest rather than the
// idempotency key itself. Keys that begin with it are always hashed, so a
// key can never pose as the digest of another key.
const HashPrefix = "sha256:"

// MaxPlainKeyLen is the longest idempotency key, in bytes, used verbatim as
// the Nats-Msg-Id. Longer keys are hashed.
const MaxPlainKeyLen = 128

// MsgID returns the Nats-Msg-Id for an outbox row with the given idempotency
// key. The relay publishes a row again whenever the outcome of an earlier
// publish is unknown (a crash between PubAck and mark, a timeout, a
// disconnect), so the id is the same on every attempt, from every replica
// and every version of the bridge; JetStream drops a message whose id it
// stored within the stream's duplicate window.
//
// The id is the key itself when the key is 1 to MaxPlainKeyLen bytes of
// visible ASCII (0x21 '!' to 0x7E '~'; no spaces, no control bytes) and does
// not begin with HashPrefix. Otherwise it is HashPrefix followed by the
// lowercase hex SHA-256 of the key's bytes (71 bytes in all). Two different
// keys never share an id. When namespace is not empty the id is prefixed
// with namespace + "/", so relays of different services can share a stream.
func MsgID(namespace, key string) string {
	id := key
	if !plain(key) {
		sum := sha256.Sum256([]byte(key))
		id = HashPrefix + hex.EncodeToString(sum[:])
	}
	if namespace == "" {
		return id
	}
	return namespace + "/" + id
}

func plain(key string) bool {
	if len(key) == 0 || len(key) > MaxPlainKeyLen || strings.HasPrefix(key, HashPrefix) {
		return false
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x21 || key[i] > 0x7e {
			return false
		}
	}
	return true
}
