package dedup

import (
	"maps"
	"sync"
)

// routesMax bounds the subjects a Routes remembers; a relay publishing to
// more starts its record over.
const routesMax = 10000

// Routes remembers, per subject, the stream that a PubAck of a publish to
// that subject named. It is how the relay finds the stream of a subject that
// the JetStream API cannot resolve: an account subject mapping ("map.a" →
// "mapped.a") is applied by the server to the publish, but a lookup of the
// stream by subject ($JS.API.STREAM.NAMES with a subject) compares the
// subject as written with the streams' subjects and finds none. Safe for
// concurrent use; the zero value is not usable, see NewRoutes.
type Routes struct {
	mu sync.RWMutex
	m  map[string]string
}

// NewRoutes returns an empty record.
func NewRoutes() *Routes { return &Routes{m: map[string]string{}} }

// Learn records that a publish to subject was stored in stream.
func (r *Routes) Learn(subject, stream string) {
	if r == nil || subject == "" || stream == "" {
		return
	}
	r.mu.RLock()
	known := r.m[subject] == stream
	r.mu.RUnlock()
	if known { // every PubAck comes here: the common case takes the read lock only
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.m) >= routesMax {
		clear(r.m)
	}
	r.m[subject] = stream
}

// Stream returns the stream learned for subject.
func (r *Routes) Stream(subject string) (string, bool) {
	if r == nil {
		return "", false
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	name, ok := r.m[subject]
	return name, ok
}

// inherit copies what prev learned into r.
func (r *Routes) inherit(prev *Routes) {
	if r == nil || prev == nil || r == prev {
		return
	}
	prev.mu.RLock()
	learned := maps.Clone(prev.m)
	prev.mu.RUnlock()
	for subject, stream := range learned {
		r.Learn(subject, stream)
	}
}
