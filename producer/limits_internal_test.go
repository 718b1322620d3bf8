package producer

import (
	"testing"

	"github.com/outbox-bridge/bridge/internal/outbox"
)

// The producer refuses the keys the relay's enqueue refuses.
func TestKeyLimitMatchesRelay(t *testing.T) {
	if keyMax != outbox.KeyMaxBytes {
		t.Fatalf("producer keyMax %d, relay outbox.KeyMaxBytes %d", keyMax, outbox.KeyMaxBytes)
	}
}

// The producer refuses the subjects the relay refuses for their length.
func TestSubjectLimitMatchesRelay(t *testing.T) {
	if subjectMax != outbox.SubjectMaxBytes {
		t.Fatalf("producer subjectMax %d, relay outbox.SubjectMaxBytes %d", subjectMax, outbox.SubjectMaxBytes)
	}
}
