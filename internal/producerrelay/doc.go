// Package producerrelay holds the tests of the producer module that need
// the relay: rows written by producer.Writer are read by the relay's own
// store, relayed to JetStream, and refused by the producer exactly where
// the relay would refuse them. The producer module cannot import the
// relay's internal packages, so these tests live in the relay's module;
// the producer module's own tests need no relay.
package producerrelay
