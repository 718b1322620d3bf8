package outbox_test

import "github.com/outbox-bridge/bridge/internal/bridgetest"

// onEveryDatabase runs test against each database kind, each in a
// parallel subtest with its own table.
var onEveryDatabase = bridgetest.OnEveryDatabase
