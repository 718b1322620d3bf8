package consumer

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// BucketConfig returns the configuration CreateBucket uses: bucket name,
// one value per key (History 1), file storage, one replica, and TTL as the
// bucket's TTL (the max age of its stream). Change fields, e.g. Replicas: 3
// in a cluster, and create the bucket with js.CreateKeyValue.
//
// ttl is how long a dedup entry is kept after its last write (the claim, or
// with WithProcessingLease the "done" mark). It must exceed the longest time
// between a message's first delivery and its last possible redelivery or
// republish of the same Nats-Msg-Id (see the package doc, "Retention").
func BucketConfig(name string, ttl time.Duration) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      name,
		Description: "Nats-Msg-Id dedup entries of a JetStream consumer",
		History:     1,
		TTL:         ttl,
		Storage:     jetstream.FileStorage,
		Replicas:    1,
	}
}

// CreateBucket creates the KV bucket holding dedup entries with
// BucketConfig(name, ttl) and returns it. Creating a bucket that exists with
// the same configuration returns it; one that exists with a different
// configuration fails with an error matching jetstream.ErrBucketExists (use
// js.UpdateKeyValue to change the TTL on purpose).
//
// ttl must be greater than 0: a bucket without TTL grows with every message
// ever processed.
func CreateBucket(ctx context.Context, js jetstream.JetStream, name string, ttl time.Duration) (jetstream.KeyValue, error) {
	if ttl <= 0 {
		return nil, fmt.Errorf("create dedup bucket %q: %w: ttl %v: must be greater than 0", name, ErrInvalidConfig, ttl)
	}
	kv, err := js.CreateKeyValue(ctx, BucketConfig(name, ttl))
	if err != nil {
		return nil, fmt.Errorf("create dedup bucket %q: %w", name, err)
	}
	return kv, nil
}
