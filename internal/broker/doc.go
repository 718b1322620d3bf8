// Package broker is the NATS side of the relay: the client connection
// (authentication, TLS, reconnects), the embedded NATS server of the
// default setup, and the JetStream streams the relay ensures at start.
package broker
