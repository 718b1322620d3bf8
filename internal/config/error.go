package config

import (
	"errors"
	"fmt"
)

// ErrInvalid is matched by errors.Is for every configuration error of the
// bridge: an *Error from Load and Validate, and the "invalid config:
// <field>: <why>" errors of the constructors (table.NewSubscriber,
// postgreswal.NewSubscriber, watermillforwarder.NewSubscriber, sink.New, …), which
// wrap it.
var ErrInvalid = errors.New("invalid config")

// Error is a bad configuration value: the key, the value given and what would be accepted.
// Load and Validate return it; a caller maps it to exit code 2.
type Error struct {
	// Key is the YAML path of the value ("relay.batch_size", "streams[0].name"), or the
	// flag ("--ensure-stream") when the value came from a flag with no YAML key.
	Key string
	// Value is the value given, as text; secrets in URLs are redacted.
	Value string
	// Allowed says what would be accepted.
	Allowed string

	// noValue drops Value from the message, for an unknown key.
	noValue bool
}

// Error returns `invalid config: <key>: <value quoted>: <allowed>`, or
// `invalid config: <key>: <allowed>` for an unknown key.
func (e *Error) Error() string {
	if e.noValue {
		return fmt.Sprintf("invalid config: %s: %s", e.Key, e.Allowed)
	}
	return fmt.Sprintf("invalid config: %s: %q: %s", e.Key, e.Value, e.Allowed)
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *Error) Is(target error) bool { return target == ErrInvalid }

// IsError reports whether err is or wraps an *Error.
func IsError(err error) bool {
	var e *Error
	return errors.As(err, &e)
}
