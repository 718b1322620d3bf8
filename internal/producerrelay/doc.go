// Package producerrelay holds the tests of the producer module that need
// the relay: rows written by producer.Writer are read by the relay's own
// store, relayed to JetStream, and refused by the producer exactly where
// the relay would refuse them.
//
// It is a module of its own (github.com/outbox-bridge/bridge/internal/
// producerrelay), so that neither the relay module nor the producer module
// needs the other: it reaches the relay's internal packages by import path
// and both modules through replace directives. Run its tests from this
// directory (go test ./...); .ci/run does.
package producerrelay
