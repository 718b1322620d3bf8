// Package config is the configuration of the bridge outbox relay.
//
// A Config is built by Load from four layers, each overriding the one before:
//
//  1. Default(): the defaults, one per key of docs/CONFIGURATION.md's table;
//  2. the YAML file named by --config;
//  3. BRIDGE_* environment variables: BRIDGE_ + the YAML path in upper snake case
//     (relay.inflight_timeout → BRIDGE_RELAY_INFLIGHT_TIMEOUT, nats.tls.ca_file →
//     BRIDGE_NATS_TLS_CA_FILE). Names are matched whole against the known keys; other
//     BRIDGE_* variables are ignored and listed by UnknownEnv. streams has no variable;
//  4. the flags of RegisterFlags that the user set; --ensure-stream replaces streams.
//
// Durations are Go durations ("250ms", "30s") everywhere. koanf merges the layers and
// mapstructure decodes them.
//
// Guarantees: Load returns a Config that passed Validate, or an error. An unknown YAML key,
// a value of the wrong type and a value out of range are each refused with an *Error that
// names the key, the value and what is allowed:
//
//	invalid config: relay.batch_size: "0": must be an integer from 1 to 100000
//
// Validate enforces publish_timeout < ack_deadline < inflight_timeout, the relation the
// relay's in-flight recovery depends on.
//
// Config.Redacted hides secrets (passwords in URLs, nats.password, nats.token) for printing;
// Config.YAML writes a document Load reads back to the same Config.
package config
