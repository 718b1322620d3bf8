package bridge_test

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/mod/modfile"
)

// The relay module's go.mod has no replace or exclude directive: with one,
// `go install github.com/outbox-bridge/bridge/cmd/bridge@latest` (the
// README's quick path) refuses to build it. The client modules and the
// tests that join them to the relay (internal/producerrelay,
// examples/service) are modules of their own, with the replace directives
// they need.
func TestGoInstallable(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("go.mod")
	require.NoError(t, err)
	mod, err := modfile.Parse("go.mod", data, nil)
	require.NoError(t, err)
	require.Empty(t, mod.Replace, "go.mod: a replace directive breaks go install …@latest")
	require.Empty(t, mod.Exclude, "go.mod: an exclude directive breaks go install …@latest")
}
